//! Reading the blob store from the CLI: full tool outputs, long texts, outputs and arguments
//! (kept by reference) and the older part of a continued run's conversation live there, not in
//! history. The store is configured like the workers'
//! (`BATON_STORE__BACKEND`, `BATON_STORE__DIR`, `BATON_STORE__S3__BUCKET`, ...; default a
//! local `.baton/blobs`).

use baton_proto::{Item, item};
use baton_store::{BlobId, SharedStore, StoreSettings, conversation::Conversations};

/// The blob store named by the environment, or why it cannot be opened.
pub(crate) fn open() -> Result<SharedStore, String> {
    let settings: StoreSettings = config::Config::builder()
        .add_source(
            config::Environment::with_prefix("BATON")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true),
        )
        .build()
        .and_then(|c| c.get::<StoreSettings>("store"))
        .unwrap_or_default();
    baton_store::open(&settings).map_err(|e| e.to_string())
}

/// Fills in what the run keeps by reference: stubs (from the stored conversation ending at
/// `head`) and full tool outputs. Returns one warning per thing it could not read.
pub(crate) async fn resolve(items: &mut [Item], head: &str) -> Vec<String> {
    let needs_store = items.iter().any(|i| match &i.kind {
        Some(item::Kind::Stub(_)) => true,
        Some(item::Kind::ToolResult(r)) => {
            (r.full_output.is_empty() && !r.full_output_ref.is_empty())
                || r.content_stored.is_some()
        }
        Some(item::Kind::Assistant(a)) => {
            a.text_stored.is_some() || a.tool_calls.iter().any(|c| !c.arguments_ref.is_empty())
        }
        _ => false,
    });
    if !needs_store {
        return Vec::new();
    }
    let store = match open() {
        Ok(store) => store,
        Err(e) => {
            return vec![format!(
                "the blob store is not readable ({e}); older items and full outputs are left out \
                 (set BATON_STORE__DIR or BATON_STORE__S3__* like the workers')"
            )];
        }
    };
    let mut warnings = Vec::new();
    if items
        .iter()
        .any(|i| matches!(i.kind, Some(item::Kind::Stub(_))))
    {
        match Conversations::new(store.clone()).load(head).await {
            Ok(stored) => {
                for (n, slot) in items.iter_mut().enumerate() {
                    if matches!(slot.kind, Some(item::Kind::Stub(_)))
                        && let Some(full) = stored.get(n)
                    {
                        *slot = full.clone();
                    }
                }
            }
            Err(e) => warnings.push(format!(
                "older conversation items are in the blob store, which could not be read: {e}"
            )),
        }
    }
    // Texts, outputs and arguments kept by reference: whole, as the model saw them.
    let conversations = Conversations::new(store.clone());
    for slot in items.iter_mut() {
        if let Err(e) = conversations
            .with_full_content(std::slice::from_mut(slot))
            .await
        {
            warnings.push(format!(
                "content kept in the blob store could not be read: {e}"
            ));
        }
        if let Some(item::Kind::ToolResult(r)) = &mut slot.kind
            && r.full_output.is_empty()
            && !r.full_output_ref.is_empty()
        {
            let read = match BlobId::parse(&r.full_output_ref) {
                Ok(id) => store.get(&id).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match read {
                Ok(bytes) => r.full_output = String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => warnings.push(format!("full output of {}: {e}", r.call_id)),
            }
        }
    }
    warnings
}

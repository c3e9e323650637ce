//! Conversations in the blob store: the workflow hands the LLM activities a stored head plus
//! the items added since ([`ConversationRef`]); the activity loads the stored part, appends
//! the new items as one more segment and returns the new head. Each segment names its parent,
//! so a turn writes only what is new, and history carries only what is new.
//!
//! Loading a long chain from an object store is many small reads; every worker keeps the
//! conversations it assembled recently in memory by head id (content-addressed, so a cached
//! entry can never be stale).

use std::{collections::VecDeque, sync::Arc};

use baton_core::view::{self, cut_text};
use baton_proto::{ConversationRef, Item, LlmRequest, LlmResponse, ToolDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::{BlobId, SharedStore, StoreError, get_json, inline, put_json};

/// Conversations a worker keeps assembled in memory.
pub const CACHED_CONVERSATIONS: usize = 64;

/// One stored segment of a conversation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Segment {
    /// Blob id of the previous segment ("" for the first).
    pub parent: String,
    /// Items in the conversation up to and including this segment.
    pub total: u32,
    /// This segment's items.
    pub items: Vec<Item>,
}

/// The system prompt and tools of a run, stored once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Context {
    /// The system prompt.
    pub system_prompt: String,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
}

/// What went wrong loading or storing a conversation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConversationError {
    /// The store failed or lacks a blob.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The stored chain does not hold what the request says.
    #[error(
        "the stored conversation {head} has {found} items, the run expected {expected}; the \
         blob store does not match this run"
    )]
    Mismatch {
        /// The head.
        head: String,
        /// Items the request said are stored.
        expected: u32,
        /// Items the chain holds.
        found: u32,
    },
}

/// Conversation storage over a blob store, with a small in-memory cache.
#[derive(Debug)]
pub struct Conversations {
    store: SharedStore,
    cache: Mutex<VecDeque<(String, Arc<Vec<Item>>)>>,
    inline_bytes: usize,
}

impl Conversations {
    /// Conversations kept in `store`.
    pub fn new(store: SharedStore) -> Self {
        Self {
            store,
            cache: Mutex::new(VecDeque::new()),
            inline_bytes: inline::DEFAULT_INLINE_BYTES,
        }
    }

    /// Reply text and tool-call arguments longer than `bytes` go to the blob store (worker
    /// setting `[history] inline_bytes`; see [`crate::inline`]).
    pub fn with_inline_bytes(mut self, bytes: usize) -> Self {
        self.inline_bytes = bytes;
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    async fn cached(&self, head: &str) -> Option<Arc<Vec<Item>>> {
        let mut cache = self.cache.lock().await;
        let pos = cache.iter().position(|(h, _)| h == head)?;
        let entry = cache.remove(pos)?;
        let items = entry.1.clone();
        cache.push_front(entry);
        Some(items)
    }

    async fn remember(&self, head: String, items: Arc<Vec<Item>>) {
        let mut cache = self.cache.lock().await;
        cache.retain(|(h, _)| *h != head);
        cache.push_front((head, items));
        cache.truncate(CACHED_CONVERSATIONS);
    }

    /// The stored conversation ending at `head` ("" = empty).
    pub async fn load(&self, head: &str) -> Result<Arc<Vec<Item>>, ConversationError> {
        if head.is_empty() {
            return Ok(Arc::new(Vec::new()));
        }
        if let Some(items) = self.cached(head).await {
            return Ok(items);
        }
        // Walk back to the first segment or to a cached prefix.
        let mut segments = Vec::new();
        let mut next = head.to_owned();
        let mut base: Arc<Vec<Item>> = Arc::new(Vec::new());
        while !next.is_empty() {
            if let Some(items) = self.cached(&next).await {
                base = items;
                break;
            }
            let id = BlobId::parse(&next)?;
            let segment: Segment = get_json(self.store.as_ref(), &id).await?;
            next = segment.parent.clone();
            segments.push(segment);
        }
        let mut items = Vec::clone(&base);
        for segment in segments.into_iter().rev() {
            items.extend(segment.items);
            if items.len() != segment.total as usize {
                return Err(ConversationError::Mismatch {
                    head: head.to_owned(),
                    expected: segment.total,
                    found: items.len() as u32,
                });
            }
        }
        let items = Arc::new(items);
        self.remember(head.to_owned(), items.clone()).await;
        Ok(items)
    }

    /// The segment of the chain ending at `head` that holds the most items, at most `items`
    /// of them: its id and its total (`None` when even the chain's first segment holds more,
    /// or `head` is ""). Walks back from `head`, one segment read each (`baton fork`: the
    /// stored part of a conversation cut at a turn).
    pub async fn segment_within(
        &self,
        head: &str,
        items: u32,
    ) -> Result<Option<(String, u32)>, ConversationError> {
        let mut next = head.to_owned();
        while !next.is_empty() {
            let id = BlobId::parse(&next)?;
            let segment: Segment = get_json(self.store.as_ref(), &id).await?;
            if segment.total <= items {
                return Ok(Some((next, segment.total)));
            }
            next = segment.parent;
        }
        Ok(None)
    }

    /// The whole conversation of `r` (stored part + added items), and the head under which
    /// it is now stored.
    pub async fn materialize(
        &self,
        r: &ConversationRef,
    ) -> Result<(String, Arc<Vec<Item>>), ConversationError> {
        let stored = self.load(&r.head).await?;
        if stored.len() != r.stored_items as usize {
            return Err(ConversationError::Mismatch {
                head: r.head.clone(),
                expected: r.stored_items,
                found: stored.len() as u32,
            });
        }
        if r.added.is_empty() {
            return Ok((r.head.clone(), stored));
        }
        let mut items = Vec::clone(&stored);
        items.extend(r.added.iter().cloned());
        let segment = Segment {
            parent: r.head.clone(),
            total: items.len() as u32,
            items: r.added.clone(),
        };
        let head = put_json(self.store.as_ref(), &segment).await?.to_string();
        let items = Arc::new(items);
        self.remember(head.clone(), items.clone()).await;
        Ok((head, items))
    }

    /// Stores a run's system prompt and tools; returns the blob id.
    pub async fn put_context(&self, context: &Context) -> Result<String, ConversationError> {
        Ok(put_json(self.store.as_ref(), context).await?.to_string())
    }

    /// A stored system prompt and tools.
    pub async fn context(&self, id: &str) -> Result<Context, ConversationError> {
        Ok(get_json(self.store.as_ref(), &BlobId::parse(id)?).await?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use baton_proto::{UserMessage, item};

    use super::*;
    use crate::local::LocalStore;

    fn user(t: &str) -> Item {
        Item {
            kind: Some(item::Kind::User(UserMessage {
                text: t.into(),
                synthetic: false,
            })),
        }
    }

    #[tokio::test]
    async fn a_chain_grows_by_segments_and_loads_on_a_cold_worker() {
        let dir = tempfile::tempdir().unwrap();
        let store: SharedStore = Arc::new(LocalStore::new(dir.path()).unwrap());
        let worker_a = Conversations::new(store.clone());
        let mut head = String::new();
        let mut n = 0u32;
        for turn in 0..20 {
            let added = vec![user(&format!("q{turn}")), user(&format!("a{turn}"))];
            let (h, items) = worker_a
                .materialize(&ConversationRef {
                    head: head.clone(),
                    stored_items: n,
                    added,
                })
                .await
                .unwrap();
            head = h;
            n = items.len() as u32;
        }
        assert_eq!(n, 40);
        // Another worker, nothing cached: walks the chain.
        let worker_b = Conversations::new(store);
        let items = worker_b.load(&head).await.unwrap();
        assert_eq!(items.len(), 40);
        assert_eq!(items[39], user("a19"));
        // A request that claims a different length is refused, not silently accepted.
        let err = worker_b
            .materialize(&ConversationRef {
                head: head.clone(),
                stored_items: 39,
                added: vec![],
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("expected 39"), "{err}");
        let err = worker_b
            .load(&"0".repeat(64))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("not in the store"), "{err}");
        // Cut at any length: the segment holding the most items that fit.
        for (at_most, total) in [(40, Some(40)), (39, Some(38)), (2, Some(2)), (1, None)] {
            let found = worker_b.segment_within(&head, at_most).await.unwrap();
            assert_eq!(found.as_ref().map(|f| f.1), total, "at most {at_most}");
            if let Some((id, n)) = found {
                assert_eq!(worker_b.load(&id).await.unwrap().len(), n as usize);
            }
        }
        assert!(worker_b.segment_within("", 9).await.unwrap().is_none());
    }
}

/// An LLM request as the provider sees it, and where its conversation is stored now.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The inline request: the model's view, the system prompt and the tools.
    pub request: LlmRequest,
    /// The stored conversation's head, with the request's new items.
    pub head: String,
    /// Items under `head`.
    pub items: u32,
    /// Blob id of the system prompt and tools.
    pub context: String,
}

impl Conversations {
    /// Turns a by-reference request into the model's view: loads the stored conversation,
    /// stores the added items (returning the new head) and the system prompt and tools (once).
    /// Inline requests pass through.
    pub async fn resolve(&self, request: LlmRequest) -> Result<Resolved, ConversationError> {
        let Some(history) = &request.history else {
            return Ok(Resolved {
                request,
                head: String::new(),
                items: 0,
                context: String::new(),
            });
        };
        let (head, items) = self.materialize(history).await?;
        let view = request.view.clone().unwrap_or_default();
        let (context, system_prompt, tools) = if request.context.is_empty() {
            let context = Context {
                system_prompt: request.system_prompt.clone(),
                tools: request.tools.clone(),
            };
            let id = self.put_context(&context).await?;
            (id, context.system_prompt, context.tools)
        } else {
            let context = self.context(&request.context).await?;
            (
                request.context.clone(),
                context.system_prompt,
                context.tools,
            )
        };
        let mut conversation = view::model_view(&items, &view);
        self.with_full_content(&mut conversation).await?;
        let mut model = request.model;
        if let Some(m) = model.as_mut().filter(|m| !m.script_ref.is_empty()) {
            m.script = Some(self.script_turn(&m.script_ref, request.turn).await?);
            m.script_ref.clear();
        }
        Ok(Resolved {
            request: LlmRequest {
                model,
                system_prompt,
                conversation,
                tools,
                history: None,
                view: None,
                context: String::new(),
                turn: request.turn,
                cache_key: request.cache_key,
                one_off: request.one_off,
            },
            head,
            items: items.len() as u32,
            context,
        })
    }

    /// Bounds the provider's reply for history and tells the workflow where the conversation
    /// and context are stored now.
    pub async fn complete(
        &self,
        resolved: &Resolved,
        response: &mut LlmResponse,
    ) -> Result<(), ConversationError> {
        if let Some(message) = response.message.as_mut() {
            self.bound_message(message).await?;
        }
        response.history_head = resolved.head.clone();
        response.history_items = resolved.items;
        response.context = resolved.context.clone();
        Ok(())
    }
}

/// Largest activity result or input baton lets into workflow history.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// An LLM response is trimmed for history when its JSON passes this (a margin under
/// [`MAX_PAYLOAD_BYTES`] for the fields around it).
pub const RESPONSE_BUDGET_BYTES: usize = 192 * 1024;
/// A provider's reasoning part longer than this always goes to the blob store: it is opaque
/// to everything but the provider it goes back to, and encrypted reasoning of every turn
/// would otherwise grow the run's history fast.
pub const MAX_INLINE_REASONING: usize = 1024;

impl Conversations {
    /// Keeps a model reply small for history: reasoning parts over [`MAX_INLINE_REASONING`]
    /// go to the blob store (`data_ref`); so do the text of a reply with tool calls and each
    /// call's arguments when over the inline limit (previews stay inline, see
    /// [`crate::inline`]). When its JSON still passes [`RESPONSE_BUDGET_BYTES`], the
    /// reasoning text, then an inline reply text, are cut.
    pub async fn bound_message(
        &self,
        message: &mut baton_proto::AssistantMessage,
    ) -> Result<(), ConversationError> {
        let store = self.store.as_ref();
        for part in &mut message.reasoning_parts {
            if part.data.len() > MAX_INLINE_REASONING && part.data_ref.is_empty() {
                let id = store
                    .put(std::mem::take(&mut part.data).into_bytes())
                    .await?;
                part.data_ref = id.to_string();
            }
        }
        if !message.tool_calls.is_empty() && message.text_stored.is_none() {
            message.text_stored =
                inline::offload_text(store, self.inline_bytes, &mut message.text).await?;
        }
        for call in &mut message.tool_calls {
            inline::offload_arguments(store, self.inline_bytes, call).await?;
        }
        let size = |m: &baton_proto::AssistantMessage| {
            serde_json::to_vec(m).map(|v| v.len()).unwrap_or(usize::MAX)
        };
        if size(message) > RESPONSE_BUDGET_BYTES {
            cut_text(&mut message.reasoning, RESPONSE_BUDGET_BYTES / 8);
        }
        if size(message) > RESPONSE_BUDGET_BYTES {
            cut_text(&mut message.text, RESPONSE_BUDGET_BYTES / 2);
        }
        Ok(())
    }

    /// Turn `turn` of a script stored by the CLI, as a one-turn script (see
    /// `Script.first_turn`).
    pub async fn script_turn(
        &self,
        id: &str,
        turn: u32,
    ) -> Result<baton_proto::Script, ConversationError> {
        let script: baton_proto::Script =
            get_json(self.store.as_ref(), &BlobId::parse(id)?).await?;
        Ok(view::script_turn(&script, turn))
    }

    /// The exact arguments of a call (from the blob store when they were too long for
    /// history).
    pub async fn full_arguments(
        &self,
        call: &baton_proto::ToolCall,
    ) -> Result<String, ConversationError> {
        if call.arguments_ref.is_empty() {
            return Ok(call.arguments.clone());
        }
        let bytes = self.store.get(&BlobId::parse(&call.arguments_ref)?).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The whole text of blob `id` (content kept by reference).
    async fn text_of(&self, id: &str, what: &str) -> Result<String, ConversationError> {
        let id = BlobId::parse(id)?;
        let bytes = self.store.get(&id).await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            StoreError::Decode {
                id,
                detail: format!("{what} must be UTF-8 text: {e}"),
            }
            .into()
        })
    }

    /// The view with every call's exact arguments, as the model wrote them, every reply text
    /// and tool output whole, and every reasoning part's data, as the provider sent it.
    pub async fn with_full_content(&self, view: &mut [Item]) -> Result<(), ConversationError> {
        for entry in view.iter_mut() {
            if let Some(baton_proto::item::Kind::ToolResult(r)) = &mut entry.kind
                && let Some(stored) = &r.content_stored
            {
                r.content = self.text_of(&stored.blob, "a tool output").await?;
                r.content_stored = None;
            }
            if let Some(baton_proto::item::Kind::Assistant(a)) = &mut entry.kind {
                if let Some(stored) = &a.text_stored {
                    a.text = self.text_of(&stored.blob, "a reply's text").await?;
                    a.text_stored = None;
                }
                for call in &mut a.tool_calls {
                    if !call.arguments_ref.is_empty() {
                        call.arguments = self.full_arguments(call).await?;
                        call.arguments_ref.clear();
                    }
                }
                for part in &mut a.reasoning_parts {
                    if !part.data_ref.is_empty() {
                        part.data = self.text_of(&part.data_ref, "a reasoning part").await?;
                        part.data_ref.clear();
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod bound_tests {
    use baton_proto::{AssistantMessage, ToolCall};

    use super::*;
    use crate::local::LocalStore;

    #[tokio::test]
    async fn a_huge_reply_is_trimmed_for_history_and_restored_for_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let conversations = Conversations::new(Arc::new(LocalStore::new(dir.path()).unwrap()));
        let content = "x".repeat(400 * 1024);
        let arguments =
            serde_json::json!({"path": "big.txt", "content": content.clone()}).to_string();
        let mut message = AssistantMessage {
            text: "writing".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "write_file".into(),
                arguments: arguments.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        conversations.bound_message(&mut message).await.unwrap();
        let trimmed = serde_json::to_vec(&message).unwrap().len();
        assert!(trimmed < 8 * 1024, "{trimmed}");
        let call = &message.tool_calls[0];
        let shown: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(shown["path"], "big.txt", "rules still see the path");
        assert_eq!(conversations.full_arguments(call).await.unwrap(), arguments);
        let mut view = vec![Item {
            kind: Some(baton_proto::item::Kind::Assistant(message.clone())),
        }];
        conversations.with_full_content(&mut view).await.unwrap();
        match &view[0].kind {
            Some(baton_proto::item::Kind::Assistant(a)) => {
                assert_eq!(a.tool_calls[0].arguments, arguments)
            }
            other => panic!("{other:?}"),
        }
        // Small replies are left alone.
        let mut small = AssistantMessage {
            text: "hi".into(),
            ..Default::default()
        };
        conversations.bound_message(&mut small).await.unwrap();
        assert_eq!(small.text, "hi");
    }

    #[tokio::test]
    async fn large_reasoning_parts_go_to_the_store_and_come_back_byte_identical() {
        let dir = tempfile::tempdir().unwrap();
        let conversations = Conversations::new(Arc::new(LocalStore::new(dir.path()).unwrap()));
        // Key order and spacing as the provider sent them: they must survive unchanged.
        let big = format!(
            r#"{{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"{}"}}"#,
            "gAAAA".repeat(600)
        );
        let small = r#"{"type": "redacted_thinking", "data": "EmwKAhgB"}"#.to_owned();
        let part = |data: &str| baton_proto::ReasoningPart {
            provider: "openai-responses".into(),
            kind: "reasoning".into(),
            data: data.to_owned(),
            ..Default::default()
        };
        let mut message = AssistantMessage {
            text: "done".into(),
            reasoning_parts: vec![part(&big), part(&small)],
            ..Default::default()
        };
        conversations.bound_message(&mut message).await.unwrap();
        let kept = &message.reasoning_parts;
        assert!(
            kept[0].data.is_empty() && !kept[0].data_ref.is_empty(),
            "{kept:?}"
        );
        assert_eq!(kept[1].data, small, "small parts stay inline");
        assert!(kept[1].data_ref.is_empty());
        assert!(serde_json::to_vec(&message).unwrap().len() < 1024);

        let mut view = vec![Item {
            kind: Some(baton_proto::item::Kind::Assistant(message)),
        }];
        conversations.with_full_content(&mut view).await.unwrap();
        match &view[0].kind {
            Some(baton_proto::item::Kind::Assistant(a)) => {
                assert_eq!(a.reasoning_parts[0].data, big);
                assert!(a.reasoning_parts[0].data_ref.is_empty());
                assert_eq!(a.reasoning_parts[1].data, small);
            }
            other => panic!("{other:?}"),
        }
    }
}

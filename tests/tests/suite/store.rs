//! The S3 blob store against a real S3-compatible server (moto, started per test).
//! Needs `pip install 'moto[server]'` (scripts/test.sh installs it); without it these tests
//! fail saying so.
#![allow(clippy::unwrap_used)]

use baton_store::{
    BlobId, BlobStore, S3Settings, S3Store, StoreError, StoreSettings, get_json, open, put_json,
};
use baton_tests::moto::{MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer};
use pretty_assertions::assert_eq;
use serde::{Deserialize, Serialize};

const BUCKET: &str = "baton-blobs";

fn settings(moto: &MotoServer, prefix: &str) -> S3Settings {
    S3Settings {
        endpoint: Some(moto.endpoint()),
        bucket: BUCKET.to_owned(),
        region: Some(MOTO_REGION.to_owned()),
        prefix: prefix.to_owned(),
        access_key_id: Some(MOTO_ACCESS_KEY_ID.to_owned()),
        secret_access_key: Some(MOTO_SECRET_ACCESS_KEY.to_owned()),
        allow_http: true,
        virtual_hosted_style: None,
    }
}

fn start() -> anyhow::Result<(MotoServer, S3Store)> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    let store = S3Store::new(&settings(&moto, "baton/blobs/"))?;
    Ok((moto, store))
}

/// Deterministic, incompressible-looking bytes.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn roundtrips_several_blobs_including_a_large_one() -> anyhow::Result<()> {
    let (_moto, store) = start()?;
    let blobs = vec![
        Vec::new(),
        b"hello, blob store".to_vec(),
        pseudo_random(64 * 1024, 7),
        pseudo_random(3 * 1024 * 1024, 42),
    ];
    let mut ids = Vec::new();
    for bytes in &blobs {
        let id = store.put(bytes.clone()).await?;
        assert_eq!(id, BlobId::of(bytes));
        ids.push(id);
    }
    for (id, bytes) in ids.iter().zip(&blobs) {
        let back = store.get(id).await?;
        assert!(
            back == *bytes,
            "blob {id} came back different ({} bytes instead of {})",
            back.len(),
            bytes.len()
        );
        assert!(store.contains(id).await?);
    }
    assert!(
        store
            .describe()
            .starts_with("s3://baton-blobs/baton/blobs/")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn put_is_idempotent_and_uploads_once() -> anyhow::Result<()> {
    let (moto, store) = start()?;
    let first = store.put(b"same bytes".to_vec()).await?;
    let second = store.put(b"same bytes".to_vec()).await?;
    assert_eq!(first, second);
    assert_eq!(store.get(&first).await?, b"same bytes");
    let upload = format!("\"PUT /{BUCKET}/{} ", store.key_of(&first));
    let log = moto.log();
    assert_eq!(
        log.matches(&upload).count(),
        1,
        "one upload expected:\n{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_objects_are_corrupt() -> anyhow::Result<()> {
    let (moto, store) = start()?;
    let id = store.put(b"original".to_vec()).await?;
    moto.put_object(BUCKET, &store.key_of(&id), b"tampered")?;
    match store.get(&id).await {
        Err(StoreError::Corrupt(bad)) => assert_eq!(bad, id),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_blobs_are_not_found() -> anyhow::Result<()> {
    let (_moto, store) = start()?;
    let id = BlobId::of(b"never stored");
    assert!(!store.contains(&id).await?);
    match store.get(&id).await {
        Err(StoreError::NotFound(missing)) => assert_eq!(missing, id),
        other => panic!("expected NotFound, got {other:?}"),
    }
    store.put(b"stored".to_vec()).await?;
    assert!(store.contains(&BlobId::of(b"stored")).await?);
    assert!(!store.contains(&id).await?);
    Ok(())
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Segment {
    turn: u32,
    messages: Vec<String>,
}

#[tokio::test(flavor = "multi_thread")]
async fn json_roundtrip() -> anyhow::Result<()> {
    let (_moto, store) = start()?;
    let segment = Segment {
        turn: 3,
        messages: vec!["user: hi".to_owned(), "assistant: hello".to_owned()],
    };
    let id = put_json(&store, &segment).await?;
    let back: Segment = get_json(&store, &id).await?;
    assert_eq!(back, segment);
    let wrong: Result<Vec<u64>, _> = get_json(&store, &id).await;
    assert!(matches!(wrong, Err(StoreError::Decode { .. })), "{wrong:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_see_each_others_blobs() -> anyhow::Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    // Both "workers" open their store the way the worker does: from settings.
    let store_settings = StoreSettings {
        backend: "s3".to_owned(),
        s3: settings(&moto, "shared/"),
        ..StoreSettings::default()
    };
    let worker_a = open(&store_settings)?;
    let worker_b = open(&store_settings)?;

    let from_a = worker_a.put(b"written by worker a".to_vec()).await?;
    let from_b = worker_b.put(pseudo_random(100_000, 9)).await?;
    assert!(worker_b.contains(&from_a).await?);
    assert_eq!(worker_b.get(&from_a).await?, b"written by worker a");
    assert_eq!(worker_a.get(&from_b).await?, pseudo_random(100_000, 9));
    // The same content from the other worker is the same blob.
    assert_eq!(worker_b.put(b"written by worker a".to_vec()).await?, from_a);

    // A store with another prefix is another namespace in the same bucket.
    let elsewhere = S3Store::new(&settings(&moto, "other/"))?;
    assert!(!elsewhere.contains(&from_a).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bucket_is_a_clear_error() -> anyhow::Result<()> {
    let moto = MotoServer::start()?;
    let store = S3Store::new(&S3Settings {
        bucket: "no-such-bucket".to_owned(),
        ..settings(&moto, "p/")
    })?;
    let err = store.put(b"x".to_vec()).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("bucket no-such-bucket does not exist"),
        "{text}"
    );
    let err = store.get(&BlobId::of(b"x")).await.unwrap_err().to_string();
    assert!(err.contains("no-such-bucket"), "{err}");
    Ok(())
}

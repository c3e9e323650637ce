//! baton's blob store: content-addressed storage for what must not live in workflow history
//! (conversation segments, full tool outputs, workspace snapshots). Used by the worker's
//! activities and by the CLI (which reads transcripts and stores large scripts).
//!
//! A blob's id is the lowercase hex SHA-256 of its bytes, so writing the same bytes twice
//! is a no-op and any worker (or the CLI) can read what another wrote.
//!
//! - [`beneath`]: files beneath a directory, reached without following a link (the worker's
//!   side of the workspace: tools, snapshots, instructions).
//! - `blob`: [`BlobId`], the [`BlobStore`] trait, [`put_json`]/[`get_json`].
//! - `error`: [`StoreError`], the failures of every backend.
//! - `settings`: [`StoreSettings`]/[`S3Settings`] (the `[store]` table) and [`open`].
//! - [`local`]: a directory (default `.baton/blobs`), for one machine or a shared volume.
//! - [`s3`]: any S3-compatible object store (AWS S3, MinIO, moto), via `object_store`.
//! - [`snapshot`]: workspace snapshots (manifest, local cache, take, restore).
//! - [`changes`]: a run's change set between two snapshots as a git patch (`git apply`
//!   accepts it), per-file counts, `diffstat`, and `extract` of chosen files.
//! - [`conversation`]: conversation chains (segments naming their parent), run context and
//!   arguments by reference, with a per-worker cache of assembled conversations.
//! - [`inline`]: content by reference: tool outputs, reply text and arguments over
//!   `[history] inline_bytes` stored once, previews in history.

pub mod beneath;
mod blob;
pub mod cached;
pub mod changes;
pub mod conversation;
mod error;
pub mod inline;
pub mod local;
pub mod s3;
mod settings;
pub mod snapshot;

pub use blob::{BlobId, BlobStore, SharedStore, check_ref_name, get_json, put_json};
pub use error::{StoreError, error_chain};
pub use local::LocalStore;
pub use s3::S3Store;
pub use settings::{S3Settings, StoreSettings, open};

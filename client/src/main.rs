//! The `baton` binary: everything is in the library (`lib.rs`).

#[tokio::main]
async fn main() {
    baton_cli::main().await;
}

//! Compiles `proto/baton/v1/baton.proto` with protox (pure Rust, no system `protoc`), then
//! generates prost types and pbjson serde impls that keep proto field names as JSON keys.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/baton/v1/baton.proto";
    println!("cargo:rerun-if-changed={proto}");
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let descriptors = protox::compile([proto], ["proto"])?;
    let descriptor_path = out.join("baton_descriptor.bin");
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&descriptors),
    )?;

    prost_build::Config::new()
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run()
        .compile_fds(descriptors)?;

    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptor_path)?)?
        .preserve_proto_field_names()
        .emit_fields()
        // Forward compatibility: a worker must accept input from a newer client (a rolling
        // upgrade) and ignore fields it does not know, as proto3 binary decoding does.
        .ignore_unknown_fields()
        .build(&[".baton"])?;
    Ok(())
}

//! `src/descriptors.bin`, the descriptors gRPC server reflection serves, is Envoy's
//! `external_auth.proto` and `rls.proto` and what they import as this build's envoy-types ships them,
//! compiled by protox (no protoc): regenerate it with
//! `KEYGATE_WRITE_DESCRIPTORS=1 cargo test -p keygate-grpc --test descriptors`.
#![allow(clippy::unwrap_used)]

use prost::Message;
use std::path::PathBuf;
use std::process::Command;

/// The services reflection describes, as files under envoy-types' `proto/data-plane-api`.
const FILES: &[&str] = &["envoy/service/auth/v3/external_auth.proto", "envoy/service/ratelimit/v3/rls.proto"];

/// The include directories under envoy-types' `proto/`.
const INCLUDES: &[&str] = &["data-plane-api", "googleapis", "protoc-gen-validate", "xds", "cel-spec"];

/// Where cargo unpacked envoy-types (its manifest's directory).
fn envoy_types_dir() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"].as_array().unwrap().iter().find(|p| p["name"] == "envoy-types").unwrap();
    PathBuf::from(package["manifest_path"].as_str().unwrap()).parent().unwrap().to_path_buf()
}

#[test]
fn the_reflection_descriptors_are_envoy_types_protos_compiled() {
    let root = envoy_types_dir().join("proto");
    let includes: Vec<PathBuf> = INCLUDES.iter().map(|d| root.join(d)).collect();
    let mut compiler = protox::Compiler::new(&includes).unwrap();
    compiler.include_imports(true).include_source_info(false);
    compiler.open_files(FILES).unwrap();
    let compiled = compiler.file_descriptor_set().encode_to_vec();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/descriptors.bin");
    if std::env::var_os("KEYGATE_WRITE_DESCRIPTORS").is_some() {
        std::fs::write(&path, &compiled).unwrap();
    }
    let committed = std::fs::read(&path).unwrap();
    assert!(
        committed == compiled,
        "src/descriptors.bin is not what envoy-types' protos compile to: run \
         `KEYGATE_WRITE_DESCRIPTORS=1 cargo test -p keygate-grpc --test descriptors`"
    );
}

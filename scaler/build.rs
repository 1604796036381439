//! Compiles the KEDA external-scaler proto with protox, so no system protoc is needed.

fn main() -> anyhow::Result<()> {
    let proto = "../proto/externalscaler.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}

//! Compiles `proto/onnx.proto` with prost, parsing it with protox (no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    prost_build::Config::new()
        // Raw tensor bytes are shared, not copied, when a model is decoded from `Bytes`.
        .bytes(["."])
        .compile_fds(descriptors)?;
    Ok(())
}

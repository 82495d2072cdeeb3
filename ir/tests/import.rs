//! Import, export and bad input, on hand-built models.

use std::path::Path;

use ckpt_ir::build::{attr_f, attr_i, attr_ints, ModelBuilder};
use ckpt_ir::onnx;
use ckpt_ir::{
    export, export_bytes, import_bytes, import_file, print_graph, DType, Dim, ImportError, Message,
};

fn small_model() -> onnx::ModelProto {
    let mut m = ModelBuilder::new(20)
        .input("x", DType::F32, "batch,4")
        .input("w", DType::F32, "4,3")
        .init_f32("b", &[3], &[0.5, -1.0, 2.0])
        .init_i64("axes", &[2], &[0, 1])
        .node("MatMul", &["x", "w"], &["h"])
        .node("Add", &["h", "b"], &["a"])
        .node_with(
            "Gemm",
            &["a", "w", ""],
            &["g"],
            vec![attr_i("transB", 0), attr_f("alpha", 1.0)],
        )
        .node_with(
            "Transpose",
            &["g"],
            &["gt"],
            vec![attr_ints("perm", &[1, 0])],
        )
        .node_with(
            "ReduceSum",
            &["gt", "axes"],
            &["loss"],
            vec![attr_i("keepdims", 0)],
        )
        .value_info("h", DType::F32, "batch,3")
        .output("loss", DType::F32, "")
        .build();
    m.doc_string = Some("doc".into());
    m.metadata_props.push(onnx::StringStringEntryProto {
        key: Some("k".into()),
        value: Some("v".into()),
    });
    m
}

fn import(bytes: Vec<u8>) -> Result<ckpt_ir::Graph, ImportError> {
    import_bytes(bytes.into(), Path::new("test.onnx"), None)
}

#[test]
fn round_trip_is_lossless_and_keeps_presence() {
    let model = small_model();
    let bytes = model.encode_to_vec();
    let g = import(bytes.clone()).unwrap();
    let out = export(&g);
    assert_eq!(out, model);
    // Field presence: transB = 0 is still present after the round trip.
    let gemm = &out.graph.as_ref().unwrap().node[2];
    let tb = gemm
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("transB"))
        .unwrap();
    assert_eq!(tb.i, Some(0));
    assert_eq!(export_bytes(&g), bytes);
}

#[test]
fn import_builds_tensors_shapes_and_edges() {
    let g = import(small_model().encode_to_vec()).unwrap();
    assert_eq!(g.node_count(), 5);
    let x = g.tensor_id("x").unwrap();
    assert_eq!(
        g.tensor(x).shape.as_ref().unwrap().dims()[0],
        Dim::sym("batch")
    );
    let b = g.tensor_id("b").unwrap();
    assert!(g.tensor(b).is_initializer());
    let w = g.tensor_id("w").unwrap();
    assert_eq!(g.tensor(w).consumers().len(), 2);
    let h = g.tensor_id("h").unwrap();
    assert_eq!(g.tensor(h).dtype, Some(DType::F32));
    let gemm = g.nodes()[2];
    assert_eq!(g.node(gemm).inputs[2], None);
    assert_eq!(g.predecessors(gemm), vec![g.nodes()[1]]);
    assert_eq!(g.symbols(), vec!["batch".to_string()]);
    ckpt_ir::verify(&g).unwrap();
}

#[test]
fn text_form_is_stable() {
    let g = import(small_model().encode_to_vec()).unwrap();
    insta::assert_snapshot!(print_graph(&g));
}

fn err(bytes: Vec<u8>) -> String {
    match import(bytes) {
        Ok(_) => panic!("import should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.onnx");
    std::fs::write(&p, b"").unwrap();
    let e = import_file(&p).unwrap_err();
    assert!(matches!(e, ImportError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("empty.onnx"));
}

#[test]
fn missing_file() {
    let e = import_file(Path::new("/nonexistent/model.onnx")).unwrap_err();
    assert!(matches!(e, ImportError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/model.onnx"));
}

#[test]
fn truncated_file() {
    let bytes = small_model().encode_to_vec();
    let e = import(bytes[..bytes.len() / 2].to_vec()).unwrap_err();
    assert!(matches!(e, ImportError::Decode { .. }), "{e}");
}

#[test]
fn not_protobuf() {
    let e = import(b"\xff\xff\xff\xff this is not a protobuf".to_vec()).unwrap_err();
    assert!(matches!(e, ImportError::Decode { .. }), "{e}");
    // Text that happens to decode still has no ir_version / graph.
    let e = import(b"hello".to_vec()).unwrap_err();
    assert!(
        matches!(
            e,
            ImportError::Decode { .. }
                | ImportError::NoIrVersion { .. }
                | ImportError::NoGraph { .. }
        ),
        "{e}"
    );
}

#[test]
fn ir_version_too_new() {
    let mut m = small_model();
    m.ir_version = Some(12);
    let e = err(m.encode_to_vec());
    assert!(e.contains("ir_version 12"), "{e}");
}

#[test]
fn undefined_input() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .node("Add", &["x", "ghost"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = err(m.encode_to_vec());
    assert!(e.contains("`ghost`") && e.contains("Add_y"), "{e}");
}

#[test]
fn two_producers() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .node("Relu", &["x"], &["y"])
        .node("Neg", &["x"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = import(m.encode_to_vec()).unwrap_err();
    assert!(matches!(e, ImportError::DuplicateProducer { .. }), "{e}");
    assert!(
        e.to_string().contains("`y`")
            && e.to_string().contains("Relu_y")
            && e.to_string().contains("Neg_y"),
        "{e}"
    );
    // Assigning a graph input is also a second producer.
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .node("Relu", &["x"], &["x"])
        .build();
    assert!(matches!(
        import(m.encode_to_vec()).unwrap_err(),
        ImportError::DuplicateProducer { .. }
    ));
}

#[test]
fn cycle() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .node("Add", &["x", "c"], &["a"])
        .node("Relu", &["a"], &["b"])
        .node("Neg", &["b"], &["c"])
        .output("c", DType::F32, "2")
        .build();
    let e = import(m.encode_to_vec()).unwrap_err();
    assert!(matches!(e, ImportError::Cycle { .. }), "{e}");
    assert!(e.to_string().contains("Relu_b"), "{e}");
}

#[test]
fn unknown_dtype() {
    let mut m = small_model();
    let vi = &mut m.graph.as_mut().unwrap().input[0];
    if let Some(onnx::type_proto::Value::TensorType(t)) =
        vi.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(99);
    }
    let e = err(m.encode_to_vec());
    assert!(e.contains("`x`") && e.contains("99"), "{e}");
}

#[test]
fn negative_dim() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2,-3")
        .node("Relu", &["x"], &["y"])
        .build();
    let e = err(m.encode_to_vec());
    assert!(
        e.contains("`x`") && e.contains("-3") && e.contains("axis 1"),
        "{e}"
    );
    let m = ModelBuilder::new(20).init_f32("w", &[-1], &[]).build();
    assert!(err(m.encode_to_vec()).contains("`w`"));
}

#[test]
fn size_overflow() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "4294967296,4294967296")
        .node("Relu", &["x"], &["y"])
        .build();
    let e = import(m.encode_to_vec()).unwrap_err();
    assert!(matches!(e, ImportError::SizeOverflow { .. }), "{e}");
    assert!(e.to_string().contains("`x`"));
}

fn external_model(location: &str) -> onnx::ModelProto {
    ModelBuilder::new(20)
        .input("x", DType::F32, "4")
        .initializer(onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![4],
            data_type: Some(DType::F32.code()),
            data_location: Some(onnx::tensor_proto::DataLocation::External as i32),
            external_data: vec![
                onnx::StringStringEntryProto {
                    key: Some("location".into()),
                    value: Some(location.into()),
                },
                onnx::StringStringEntryProto {
                    key: Some("offset".into()),
                    value: Some("0".into()),
                },
                onnx::StringStringEntryProto {
                    key: Some("length".into()),
                    value: Some("16".into()),
                },
            ],
            ..Default::default()
        })
        .node("Add", &["x", "w"], &["y"])
        .output("y", DType::F32, "4")
        .build()
}

#[test]
fn external_data_is_referenced_not_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("weights.bin"), [0u8; 16]).unwrap();
    let p = dir.path().join("m.onnx");
    let model = external_model("weights.bin");
    std::fs::write(&p, model.encode_to_vec()).unwrap();
    let g = import_file(&p).unwrap();
    let w = g.tensor_id("w").unwrap();
    assert!(matches!(
        &g.tensor(w).source,
        ckpt_ir::TensorSource::Initializer { data: ckpt_ir::InitData::External { location, .. }, .. } if location == "weights.bin"
    ));
    assert_eq!(export(&g), model);
}

#[test]
fn external_data_outside_model_dir() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("model");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(dir.path().join("secret.bin"), [0u8; 16]).unwrap();
    for loc in ["../secret.bin", "/etc/passwd"] {
        let p = sub.join("m.onnx");
        std::fs::write(&p, external_model(loc).encode_to_vec()).unwrap();
        let e = import_file(&p).unwrap_err();
        assert!(
            matches!(e, ImportError::ExternalOutsideDir { .. }),
            "{loc}: {e}"
        );
        assert!(e.to_string().contains("`w`"));
    }
    // A symlink inside the directory that points outside is refused too.
    std::os::unix::fs::symlink(dir.path().join("secret.bin"), sub.join("link.bin")).unwrap();
    let p = sub.join("m.onnx");
    std::fs::write(&p, external_model("link.bin").encode_to_vec()).unwrap();
    assert!(matches!(
        import_file(&p).unwrap_err(),
        ImportError::ExternalOutsideDir { .. }
    ));
}

#[test]
fn external_data_missing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    std::fs::write(&p, external_model("nothere.bin").encode_to_vec()).unwrap();
    let e = import_file(&p).unwrap_err();
    assert!(matches!(e, ImportError::ExternalMissing { .. }), "{e}");
    assert!(e.to_string().contains("nothere.bin"));
    // Present but too short.
    std::fs::write(dir.path().join("short.bin"), [0u8; 8]).unwrap();
    std::fs::write(&p, external_model("short.bin").encode_to_vec()).unwrap();
    assert!(matches!(
        import_file(&p).unwrap_err(),
        ImportError::ExternalMalformed { .. }
    ));
}

#[test]
fn undefined_output() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .output("nope", DType::F32, "2")
        .build();
    assert!(err(m.encode_to_vec()).contains("`nope`"));
}

/// A name listed twice among the graph inputs, or twice among the initializers, breaks
/// single assignment: refused naming the tensor.
#[test]
fn duplicate_graph_input_or_initializer() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .input("x", DType::F32, "2")
        .node("Neg", &["x"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = err(m.encode_to_vec());
    assert!(e.contains("`x`") && e.contains("graph inputs"), "{e}");
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .init_f32("w", &[2], &[1.0, 2.0])
        .init_f32("w", &[2], &[3.0, 4.0])
        .node("Add", &["x", "w"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = err(m.encode_to_vec());
    assert!(e.contains("`w`") && e.contains("initializers"), "{e}");
    // An initializer that is also a graph input (an overridable default) is one assignment.
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .input("w", DType::F32, "2")
        .init_f32("w", &[2], &[1.0, 2.0])
        .node("Add", &["x", "w"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    import(m.encode_to_vec()).unwrap();
}

/// An attribute whose `type` names one field and whose data is in another, or which holds
/// two value fields, is refused naming the node and the attribute.
#[test]
fn attribute_type_disagreeing_with_its_data() {
    let mut wrong_type = attr_i("axis", 0);
    wrong_type.r#type = Some(onnx::attribute_proto::AttributeType::Float as i32);
    let mut two_fields = attr_i("axis", 0);
    two_fields.f = Some(1.0);
    for (a, why) in [
        (wrong_type, "type is FLOAT but it holds a INT"),
        (two_fields, "2 value fields"),
    ] {
        let m = ModelBuilder::new(20)
            .input("x", DType::F32, "2,3")
            .node_with("Softmax", &["x"], &["y"], vec![a])
            .output("y", DType::F32, "2,3")
            .build();
        let e = err(m.encode_to_vec());
        assert!(
            e.contains("Softmax_y") && e.contains("`axis`") && e.contains(why),
            "{e}"
        );
    }
}

/// An embedded initializer whose data is shorter (or longer) than its shape needs is
/// refused naming it, in raw_data bytes or typed values.
#[test]
fn initializer_data_of_the_wrong_size() {
    let raw = onnx::TensorProto {
        name: Some("w".into()),
        dims: vec![4, 4],
        data_type: Some(DType::F32.code()),
        raw_data: Some(vec![0u8; 12].into()),
        ..Default::default()
    };
    let typed = onnx::TensorProto {
        raw_data: None,
        float_data: vec![1.0; 15],
        ..raw.clone()
    };
    for (t, why) in [
        (raw, "holds 12 raw_data bytes where its shape needs 64"),
        (typed, "holds 15 float_data values where its shape needs 16"),
    ] {
        let m = ModelBuilder::new(20)
            .input("x", DType::F32, "4,4")
            .initializer(t)
            .node("Add", &["x", "w"], &["y"])
            .output("y", DType::F32, "4,4")
            .build();
        let e = err(m.encode_to_vec());
        assert!(e.contains("`w`") && e.contains(why), "{e}");
    }
}

/// Ops no registry knows are refused naming the node: a lowercase `relu`, an op of an unknown
/// domain, an op newer than the imported opset. ORT's own domains and the model's functions
/// are known.
#[test]
fn ops_no_registry_knows() {
    let relu = ModelBuilder::new(20)
        .input("x", DType::F32, "2")
        .node("relu", &["x"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = err(relu.encode_to_vec());
    assert!(
        e.contains("relu_y") && e.contains("`relu`") && e.contains("no such operator"),
        "{e}"
    );
    let domain = ModelBuilder::new(20)
        .opset("my.domain", 1)
        .input("x", DType::F32, "2")
        .node_in("my.domain", "Relu", &["x"], &["y"], vec![])
        .output("y", DType::F32, "2")
        .build();
    let e = err(domain.encode_to_vec());
    assert!(
        e.contains("`my.domain`") && e.contains("neither ONNX nor ONNX Runtime"),
        "{e}"
    );
    let newer = ModelBuilder::new(17)
        .input("x", DType::F32, "2")
        .node("Gelu", &["x"], &["y"])
        .output("y", DType::F32, "2")
        .build();
    let e = err(newer.encode_to_vec());
    assert!(e.contains("from opset 20") && e.contains("opset 17"), "{e}");
    let contrib = ModelBuilder::new(20)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "2")
        .node_in("com.microsoft", "Gelu", &["x"], &["y"], vec![])
        .output("y", DType::F32, "2")
        .build();
    import(contrib.encode_to_vec()).unwrap();
    let mut function = domain.clone();
    function.functions.push(onnx::FunctionProto {
        name: Some("Relu".into()),
        domain: Some("my.domain".into()),
        input: vec!["a".into()],
        output: vec!["b".into()],
        node: vec![onnx::NodeProto {
            op_type: Some("Relu".into()),
            input: vec!["a".into()],
            output: vec!["b".into()],
            ..Default::default()
        }],
        opset_import: vec![onnx::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(20),
        }],
        ..Default::default()
    });
    import(function.encode_to_vec()).unwrap();
}

/// Opset imports under IR version 1 are refused (`opset_import` exists from IR version 3).
#[test]
fn ir_version_1_with_opset_imports() {
    let mut m = small_model();
    m.ir_version = Some(1);
    let e = err(m.encode_to_vec());
    assert!(
        e.contains("IR version 1") && e.contains("opset_import"),
        "{e}"
    );
}

/// The library's import applies the op's schema, as ONNX's checker does: a `Relu` given two
/// inputs, or an attribute its schema does not name, is refused, naming the node.
#[test]
fn a_node_that_breaks_its_schema_is_refused() {
    let two_inputs = ModelBuilder::new(17)
        .input("x", DType::F32, "4")
        .input("y", DType::F32, "4")
        .node("Relu", &["x", "y"], &["r"])
        .output("r", DType::F32, "4")
        .bytes();
    let e = err(two_inputs);
    assert!(e.contains("Relu_r") && e.contains("2 inputs"), "{e}");
    let stray_attribute = ModelBuilder::new(20)
        .input("x", DType::F32, "4")
        .node_with("ReduceSum", &["x"], &["s"], vec![attr_ints("axes", &[0])])
        .output("s", DType::F32, "")
        .bytes();
    let e = err(stray_attribute);
    assert!(e.contains("ReduceSum_s") && e.contains("`axes`"), "{e}");
}

/// An initializer that overrides a graph input of another element type or shape is refused,
/// naming it and both types (ONNX's checker refuses the pair).
#[test]
fn an_initializer_unlike_the_input_it_overrides_is_refused() {
    for (dtype, shape) in [(DType::Bool, "2"), (DType::F32, "3")] {
        let bytes = ModelBuilder::new(17)
            .input("x", DType::F32, "2")
            .input("w", dtype, shape)
            .init_f32("w", &[2], &[1.0, 2.0])
            .node("Add", &["x", "w"], &["y"])
            .output("y", DType::F32, "2")
            .bytes();
        let e = err(bytes);
        assert!(
            e.contains("tensor `w`") && e.contains("but f32[2] in the initializers"),
            "{e}"
        );
    }
}

/// A value_info entry that types an initializer another way than it stores is refused, naming
/// the tensor and both typings.
#[test]
fn a_value_info_unlike_the_initializer_it_names_is_refused() {
    let bytes = ModelBuilder::new(17)
        .input("x", DType::F32, "2")
        .init_f32("w", &[2], &[1.0, 2.0])
        .node("Add", &["x", "w"], &["y"])
        .value_info("w", DType::Bool, "1")
        .output("y", DType::F32, "2")
        .bytes();
    let e = err(bytes);
    assert!(
        e.contains("tensor `w` is f32[2] in the initializers but bool[1] in the value_info"),
        "{e}"
    );
}

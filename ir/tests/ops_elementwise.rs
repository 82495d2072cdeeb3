//! Elementwise ops: numpy broadcasting on symbolic dims, dtype rules, integer values.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_s, ModelBuilder};
use ckpt_ir::ops::may_inplace;
use ckpt_ir::DType;
use ops_common::{producer, run, try_run, ty, val};

#[test]
fn broadcasting_keeps_symbols_and_ones_broadcast() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,h,s,s")
        .input("mask", DType::Bool, "s,s")
        .input("bias", DType::F32, "1,h,1,1")
        .input("c", DType::F32, "")
        .node("Add", &["x", "bias"], &["a"])
        .node("Mul", &["a", "c"], &["m"])
        .node("Where", &["mask", "c", "m"], &["w"])
        .node("Less", &["w", "c"], &["lt"])
        .node("Not", &["lt"], &["n"])
        .node("And", &["n", "mask"], &["and"])
        .node_with(
            "Cast",
            &["and"],
            &["f"],
            vec![attr_i("to", DType::F16.code() as i64)],
        )
        .node("Sum", &["x", "bias", "c"], &["sum"])
        .node_with(
            "Gelu",
            &["x"],
            &["gelu"],
            vec![attr_s("approximate", "tanh")],
        )
        .output("w", DType::F32, "")
        .output("f", DType::F16, "")
        .output("sum", DType::F32, "")
        .output("gelu", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "a"), "f32[b,h,s,s]");
    assert_eq!(ty(&g, &t, "m"), "f32[b,h,s,s]");
    assert_eq!(ty(&g, &t, "w"), "f32[b,h,s,s]");
    assert_eq!(ty(&g, &t, "lt"), "bool[b,h,s,s]");
    assert_eq!(ty(&g, &t, "and"), "bool[b,h,s,s]");
    assert_eq!(ty(&g, &t, "f"), "f16[b,h,s,s]");
    assert_eq!(ty(&g, &t, "sum"), "f32[b,h,s,s]");
    assert_eq!(ty(&g, &t, "gelu"), "f32[b,h,s,s]");
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
}

#[test]
fn undecidable_broadcast_is_assumed_and_noted() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "n,4")
        .input("y", DType::F32, "8,4")
        .node("Add", &["x", "y"], &["z"])
        .output("z", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "z"), "f32[8,4]");
    assert_eq!(t.warnings().len(), 1);
    assert!(
        t.warnings()[0].contains("Add_z") && t.warnings()[0].contains("n == 8"),
        "{:?}",
        t.warnings()
    );
}

#[test]
fn known_dims_that_do_not_broadcast_are_an_error_naming_the_node() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "3,4")
        .input("y", DType::F32, "5,4")
        .node("Mul", &["x", "y"], &["z"])
        .output("z", DType::F32, "")
        .build();
    let e = try_run(m).unwrap_err().to_string();
    assert!(
        e.contains("Mul_z") && e.contains("(Mul)") && e.contains("3 and 5"),
        "{e}"
    );
}

#[test]
fn integer_arithmetic_on_shape_values() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,s,64")
        .init_i64("two", &[], &[2])
        .init_i64("i2", &[], &[2])
        .init_i64("neg", &[], &[-3])
        .node("Shape", &["x"], &["sh"])
        .node_with("Gather", &["sh", "i2"], &["d"], vec![attr_i("axis", 0)])
        .node("Div", &["d", "two"], &["half"])
        .node("Sub", &["sh", "two"], &["minus"])
        .node("Div", &["neg", "two"], &["floor"])
        .node("Equal", &["sh", "sh"], &["same"])
        .node("Neg", &["half"], &["nh"])
        .node_with("Cast", &["half"], &["as_f"], vec![attr_i("to", 1)])
        .output("minus", DType::I64, "")
        .output("floor", DType::I64, "")
        .output("same", DType::Bool, "")
        .output("nh", DType::I64, "")
        .output("as_f", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(val(&g, &t, "half").as_deref(), Some("32"));
    assert_eq!(val(&g, &t, "minus").as_deref(), Some("(b - 2),(s - 2),62"));
    assert_eq!(val(&g, &t, "floor").as_deref(), Some("(-2)"));
    assert_eq!(val(&g, &t, "same").as_deref(), Some("1,1,1"));
    assert_eq!(val(&g, &t, "nh").as_deref(), Some("(-32)"));
    assert_eq!(val(&g, &t, "as_f"), None, "float tensors carry no values");
}

#[test]
fn measured_in_place_kernels() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "4")
        .node("Relu", &["x"], &["r"])
        .node("Exp", &["r"], &["e"])
        .node("Add", &["r", "e"], &["a"])
        .output("a", DType::F32, "")
        .build();
    let (g, _) = run(m);
    assert_eq!(may_inplace(&g, producer(&g, "r")), Some((0, 0)));
    assert_eq!(may_inplace(&g, producer(&g, "e")), None);
    assert_eq!(may_inplace(&g, producer(&g, "a")), None);
}

#[test]
fn legacy_broadcast_before_opset_7_follows_a() {
    let m = ModelBuilder::new(6)
        .input("x", DType::F32, "n,3,8,8")
        .input("b", DType::F32, "3")
        .node_with(
            "Add",
            &["x", "b"],
            &["y"],
            vec![attr_i("broadcast", 1), attr_i("axis", 1)],
        )
        .output("y", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f32[n,3,8,8]");
}

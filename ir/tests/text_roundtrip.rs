//! The text form reads back: print → parse → print is the identity on every fixture and the
//! example, and text that is not a graph is refused with the line, column and what was
//! expected.

use std::path::{Path, PathBuf};

use ckpt_ir::{import_file, parse_graph, print_graph, DType, Dim, InitData, TensorSource};

fn models() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    v.sort();
    v.push(root.join("examples/gpt2_4l_train.onnx"));
    v
}

/// Every fixture and the example print, parse and print to the same text.
#[test]
fn print_parse_print_is_the_identity_on_every_fixture() {
    let models = models();
    assert_eq!(models.len(), 23, "{models:?}");
    for path in models {
        let g = import_file(&path).unwrap();
        let text = print_graph(&g);
        let back = parse_graph(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let again = print_graph(&back);
        if again != text {
            let diff = text
                .lines()
                .zip(again.lines())
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("printed: {a}\nreprinted: {b}"));
            panic!("{}: text changed\n{diff:?}", path.display());
        }
        assert_eq!(back.node_count(), g.node_count());
        assert_eq!(back.tensor_count(), g.tensor_count());
    }
}

const SMALL: &str = r#"
ir_version 10
opset ai.onnx 17
opset com.microsoft 1
input %0 "x": f32[batch,4]
input+init %1 "s": f32[] = [0.5]
init %2 "w": f32[4,4]
init %3 "e": i64[2] external("w.bin", offset=8, length=16)
%4 "h": f32[batch,4] = MatMul(%0, %2)  # n1 "mm"
%5 "y": ?[?], _ = com.microsoft::Op(%4, _, %1) {f=1e-5, fs=[1.0, -2.5], i=-3, is=ints[], s="a\"b", t=i64[2] [2, 3]}  # n0
%6 "z": f32[(2*batch + 1)] = Concat(%4, %4, %3) {axis=0}
output %6 "z"
"#;

/// Everything the printer prints comes back: kinds of tensors, initializer values, external
/// data, symbolic dims and expressions, attributes of each printed type, omitted slots,
/// domains, node ids and names.
#[test]
fn a_hand_written_graph_reads_back_with_everything_printed() {
    let g = parse_graph(SMALL).unwrap();
    let s = g.tensor_id("s").unwrap();
    assert!(matches!(
        g.tensor(s).source,
        TensorSource::Initializer {
            overridable: true,
            ..
        }
    ));
    assert_eq!(g.inputs().len(), 2);
    let e = g.tensor_id("e").unwrap();
    assert_eq!(
        g.tensor(e).source,
        TensorSource::Initializer {
            data: InitData::External {
                location: "w.bin".into(),
                offset: 8,
                length: Some(16)
            },
            overridable: false
        }
    );
    let z = g.tensor_id("z").unwrap();
    assert_eq!(
        g.tensor(z).shape.as_ref().unwrap().dims()[0],
        Dim::sym("batch").mul(&Dim::Known(2)).add(&Dim::Known(1))
    );
    let y = g.tensor_id("y").unwrap();
    assert_eq!((g.tensor(y).dtype, g.tensor(y).shape.clone()), (None, None));
    let op = g.tensor(y).producer().unwrap();
    assert_eq!(op.index(), 0, "the id written");
    assert_eq!(g.node(op).domain, "com.microsoft");
    assert_eq!(g.node(op).inputs[1], None);
    assert_eq!(g.node(op).outputs[1], None);
    assert_eq!(g.node(op).attr_f("f"), Some(1e-5));
    assert_eq!(g.node(op).attr_i("i"), Some(-3));
    assert_eq!(g.node(op).attr_s("s").as_deref(), Some("a\"b"));
    assert_eq!(g.node(op).attr("fs").unwrap().floats, vec![1.0, -2.5]);
    assert_eq!(g.node(op).attr_t("t").unwrap().dims, vec![2]);
    let mm = g.tensor(g.tensor_id("h").unwrap()).producer().unwrap();
    assert_eq!((mm.index(), g.node(mm).name.as_str()), (1, "mm"));
    let concat = g.tensor(z).producer().unwrap();
    assert_eq!(concat.index(), 2, "the free id");
    assert_eq!(g.nodes().len(), 3);
    assert_eq!(g.node(g.nodes()[0]).name, "mm", "file order is line order");
    assert_eq!(g.tensor(g.tensor_id("w").unwrap()).dtype, Some(DType::F32));
    // And it prints as a graph the printer wrote: parse of that is the identity again.
    let text = print_graph(&g);
    assert_eq!(print_graph(&parse_graph(&text).unwrap()), text);
    assert!(
        text.contains("input+init %1 \"s\": f32[] = [0.5]"),
        "{text}"
    );
    assert!(text.contains("is=ints[]"), "{text}");
}

/// `(line, column, what the message must say)` for each broken text.
#[test]
fn errors_name_line_column_and_what_was_expected() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("input %0 \"x\" f32[2]", 1, 14, "expected `:`"),
        ("input %0 \"x\": q7[2]", 1, 15, "expected a dtype"),
        ("input %0 \"x\": f32[2,", 1, 21, "expected a dim"),
        (
            "\ninput %0 \"x\": f32[2]\n%1 \"y\": f32[2] = Relu(%5)",
            3,
            23,
            "%5 is not",
        ),
        (
            "input %0 \"x\": f32[2]\ninput %0 \"y\": f32[2]",
            2,
            7,
            "%0 is",
        ),
        (
            "input %0 \"x\": f32[2]\ninput %1 \"x\": f32[2]",
            2,
            7,
            "\"x\" is",
        ),
        ("input %0 \"x: f32[2]", 1, 10, "closed by"),
        ("inputs %0 \"x\": f32[2]", 1, 1, "expected a line"),
        (
            "input %0 \"x\": f32[2]\n%1 \"y\": f32[2] = Relu(%0) {alpha=}",
            2,
            34,
            "an attribute value",
        ),
        (
            "input %0 \"x\": f32[2]\n%1 \"y\": f32[2] = Relu(%0",
            2,
            25,
            "expected `,`",
        ),
        (
            "input %0 \"x\": f32[2]\n%1 \"y\": f32[2] = Relu(%?\"z\")",
            2,
            23,
            "earlier line",
        ),
        (
            "input %0 \"x\": f32[2]\noutput %0 \"y\"",
            2,
            11,
            "the name of %0",
        ),
        (
            "init %0 \"w\": f16[2] = [1.0]",
            1,
            23,
            "f32, i64, i32 and bool tensors",
        ),
        ("init %0 \"w\": f32[2] = [1.0, x]", 1, 29, "an f32 value"),
        (
            "input %0 \"x\": f32[2]\n%1 \"y\": f32[2] = Relu(%0)  # n3",
            2,
            30,
            "below twice the node count 1",
        ),
        ("ir_version ten", 1, 12, "an IR version"),
        ("input %0 \"x\": f32[2] extra", 1, 22, "the end of the line"),
    ];
    for &(text, line, column, says) in cases {
        let e = match parse_graph(text) {
            Ok(_) => panic!("parsed: {text}"),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert_eq!((e.line, e.column), (line, column), "{text}: {msg}");
        assert!(msg.contains(says), "{text}: {msg}");
        assert!(
            msg.starts_with(&format!("line {line}, column {column}: expected ")),
            "{msg}"
        );
    }
}

/// A graph a patch removed a node from prints its node ids with a gap, and reads back the
/// same: the id no line takes is left empty.
#[test]
fn a_graph_with_a_removed_node_reads_back_with_its_ids() {
    let text =
        "ir_version 10\nopset ai.onnx 20\ninput %0 \"a\": f32[4,3]\ninput %1 \"b\": f32[4,5]\n\
                %2 \"t\": f32[3,4] = Transpose(%0) {perm=[1, 0]}  # n0 \"t\"\n\
                %3 \"y\": f32[3,5] = MatMul(%2, %1)  # n1 \"y\"\noutput %3 \"y\"\n";
    let mut g = parse_graph(text).unwrap();
    let (transpose, matmul) = (g.nodes()[0], g.nodes()[1]);
    let (a, b) = (g.tensor_id("a").unwrap(), g.tensor_id("b").unwrap());
    let patch = ckpt_ir::Patch {
        substitutes: vec![ckpt_ir::Substitute {
            node: matmul,
            op_type: "Gemm".into(),
            attributes: vec![ckpt_ir::build::attr_i("transA", 1)],
            inputs: vec![
                Some(ckpt_ir::TensorRef::Existing(a)),
                Some(ckpt_ir::TensorRef::Existing(b)),
            ],
        }],
        removals: vec![transpose],
        ..ckpt_ir::Patch::new("fold")
    };
    patch.apply(&mut g).unwrap();
    let printed = print_graph(&g);
    assert!(
        printed.contains("= Gemm(%0, %1) {transA=1}  # n1 \"y\""),
        "{printed}"
    );
    assert_eq!(print_graph(&parse_graph(&printed).unwrap()), printed);
}

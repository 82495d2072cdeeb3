//! A minimal protobuf walk over serialized ONNX bytes that lists the `(domain, op_type)` of every node, including
//! nodes in subgraphs and model-local functions. It exists only to name the ops in an error message; the real
//! model reader is `ckpt-ir`.

/// `(domain, op_type)` of every node, in file order, duplicates kept.
pub(crate) fn node_ops(model: &[u8]) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (field, value) in fields(model) {
        match (field, value) {
            (7, Field::Bytes(graph)) => graph_ops(graph, &mut ops),
            (25, Field::Bytes(function)) => function_ops(function, &mut ops),
            _ => {}
        }
    }
    ops
}

/// GraphProto: node = 1.
fn graph_ops(graph: &[u8], ops: &mut Vec<(String, String)>) {
    for (field, value) in fields(graph) {
        if let (1, Field::Bytes(node)) = (field, value) {
            node_op(node, ops);
        }
    }
}

/// FunctionProto: node = 7.
fn function_ops(function: &[u8], ops: &mut Vec<(String, String)>) {
    for (field, value) in fields(function) {
        if let (7, Field::Bytes(node)) = (field, value) {
            node_op(node, ops);
        }
    }
}

/// NodeProto: op_type = 4, domain = 7, attribute = 5 (AttributeProto: g = 6, graphs = 11).
fn node_op(node: &[u8], ops: &mut Vec<(String, String)>) {
    let mut op_type = String::new();
    let mut domain = String::new();
    let mut subgraphs = Vec::new();
    for (field, value) in fields(node) {
        match (field, value) {
            (4, Field::Bytes(b)) => op_type = String::from_utf8_lossy(b).into_owned(),
            (7, Field::Bytes(b)) => domain = String::from_utf8_lossy(b).into_owned(),
            (5, Field::Bytes(attr)) => {
                for (f, v) in fields(attr) {
                    if let (6 | 11, Field::Bytes(g)) = (f, v) {
                        subgraphs.push(g);
                    }
                }
            }
            _ => {}
        }
    }
    ops.push((domain, op_type));
    for g in subgraphs {
        graph_ops(g, ops);
    }
}

enum Field<'a> {
    Scalar,
    Bytes(&'a [u8]),
}

/// The top-level fields of one message; stops quietly at the first malformed byte.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = (u64, Field<'_>)> {
    std::iter::from_fn(move || {
        let key = varint(&mut buf)?;
        let field = match key & 7 {
            0 => {
                varint(&mut buf)?;
                Field::Scalar
            }
            1 => {
                buf = buf.get(8..)?;
                Field::Scalar
            }
            5 => {
                buf = buf.get(4..)?;
                Field::Scalar
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (head, tail) = (buf.get(..len)?, buf.get(len..)?);
                buf = tail;
                Field::Bytes(head)
            }
            _ => return None,
        };
        Some((key >> 3, field))
    })
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

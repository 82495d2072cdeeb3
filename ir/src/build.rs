//! A small builder of ONNX models, for tests and examples: shapes are written as text
//! (`"batch,32"`: numbers are dim values, names are dim params, `?` is an unknown dim).

use crate::dtype::DType;
use crate::onnx;
use crate::onnx::attribute_proto::AttributeType;

/// Builds a `ModelProto` node by node.
#[derive(Clone, Debug)]
pub struct ModelBuilder {
    model: onnx::ModelProto,
}

impl ModelBuilder {
    /// An IR 10 model importing the default domain at `opset`.
    pub fn new(opset: i64) -> ModelBuilder {
        ModelBuilder {
            model: onnx::ModelProto {
                ir_version: Some(10),
                opset_import: vec![onnx::OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(opset),
                }],
                producer_name: Some("ckpt-opt-test".into()),
                graph: Some(onnx::GraphProto {
                    name: Some("g".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    fn graph(&mut self) -> &mut onnx::GraphProto {
        self.model.graph.get_or_insert_with(Default::default)
    }

    /// Import another domain.
    pub fn opset(mut self, domain: &str, version: i64) -> Self {
        self.model.opset_import.push(onnx::OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(version),
        });
        self
    }

    pub fn input(mut self, name: &str, dtype: DType, shape: &str) -> Self {
        let vi = value_info(name, dtype, shape);
        self.graph().input.push(vi);
        self
    }

    pub fn output(mut self, name: &str, dtype: DType, shape: &str) -> Self {
        let vi = value_info(name, dtype, shape);
        self.graph().output.push(vi);
        self
    }

    pub fn value_info(mut self, name: &str, dtype: DType, shape: &str) -> Self {
        let vi = value_info(name, dtype, shape);
        self.graph().value_info.push(vi);
        self
    }

    /// A float initializer with the given values (raw_data).
    pub fn init_f32(mut self, name: &str, dims: &[i64], values: &[f32]) -> Self {
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.graph().initializer.push(onnx::TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(DType::F32.code()),
            raw_data: Some(raw.into()),
            ..Default::default()
        });
        self
    }

    /// An int64 initializer (int64_data).
    pub fn init_i64(mut self, name: &str, dims: &[i64], values: &[i64]) -> Self {
        self.graph().initializer.push(onnx::TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(DType::I64.code()),
            int64_data: values.to_vec(),
            ..Default::default()
        });
        self
    }

    /// Any initializer.
    pub fn initializer(mut self, t: onnx::TensorProto) -> Self {
        self.graph().initializer.push(t);
        self
    }

    /// A default-domain node named after its first output.
    pub fn node(self, op: &str, inputs: &[&str], outputs: &[&str]) -> Self {
        self.node_with(op, inputs, outputs, vec![])
    }

    /// A default-domain node with attributes.
    pub fn node_with(
        mut self,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<onnx::AttributeProto>,
    ) -> Self {
        let name = outputs
            .first()
            .map_or_else(|| op.to_string(), |o| format!("{op}_{o}"));
        self.graph().node.push(onnx::NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: Some(name),
            op_type: Some(op.into()),
            domain: Some(String::new()),
            attribute: attrs,
            ..Default::default()
        });
        self
    }

    /// A node in another domain.
    pub fn node_in(
        mut self,
        domain: &str,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<onnx::AttributeProto>,
    ) -> Self {
        self = self.node_with(op, inputs, outputs, attrs);
        if let Some(n) = self.graph().node.last_mut() {
            n.domain = Some(domain.into());
        }
        self
    }

    pub fn build(self) -> onnx::ModelProto {
        self.model
    }

    /// The serialized model.
    pub fn bytes(self) -> Vec<u8> {
        prost::Message::encode_to_vec(&self.model)
    }
}

/// A chain of `links` elementwise nodes, `h{i+1} = Mul(h{i}, w)` from the input `x` (f32
/// `[16]`) and the parameter `w`, then `loss = ReduceSum(h)`: the longest path any walk over
/// the graph can meet, for scale tests, the bench and the fuzzer.
pub fn chain(links: usize) -> ModelBuilder {
    let mut b = ModelBuilder::new(17)
        .input("x", DType::F32, "16")
        .init_f32("w", &[16], &[0.5; 16]);
    let mut prev = "x".to_string();
    for i in 0..links {
        let next = format!("h{i}");
        b = b.node("Mul", &[&prev, "w"], &[&next]);
        prev = next;
    }
    b.node_with(
        "ReduceSum",
        &[&prev],
        &["loss"],
        vec![attr_i("keepdims", 0)],
    )
    .output("loss", DType::F32, "")
}

/// `links` `Neg` nodes, their outputs named `{prefix}{i}`, spliced into `g` in front of node
/// `k`, whose input `slot` then reads the chain's end (an even count leaves the values as
/// they were): a long path through a real graph, for the fuzzer and the scale tests.
pub fn splice_neg_chain(
    g: &mut onnx::GraphProto,
    k: usize,
    slot: usize,
    links: usize,
    prefix: &str,
) {
    let mut prev = g.node[k].input[slot].clone();
    let chain: Vec<onnx::NodeProto> = (0..links)
        .map(|i| {
            let next = format!("{prefix}{i}");
            onnx::NodeProto {
                input: vec![std::mem::replace(&mut prev, next.clone())],
                output: vec![next],
                op_type: Some("Neg".into()),
                ..Default::default()
            }
        })
        .collect();
    g.node[k].input[slot] = prev;
    g.node.splice(k..k, chain);
}

/// A tensor value_info with a shape written as text.
pub fn value_info(name: &str, dtype: DType, shape: &str) -> onnx::ValueInfoProto {
    use onnx::tensor_shape_proto::{dimension::Value, Dimension};
    let dim = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Dimension {
            value: match s.parse::<i64>() {
                Ok(v) => Some(Value::DimValue(v)),
                Err(_) if s == "?" => None,
                Err(_) => Some(Value::DimParam(s.into())),
            },
            denotation: None,
        })
        .collect();
    onnx::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(onnx::TypeProto {
            value: Some(onnx::type_proto::Value::TensorType(
                onnx::type_proto::Tensor {
                    elem_type: Some(dtype.code()),
                    shape: Some(onnx::TensorShapeProto { dim }),
                },
            )),
            denotation: None,
        }),
        ..Default::default()
    }
}

pub fn attr_i(name: &str, v: i64) -> onnx::AttributeProto {
    onnx::AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

pub fn attr_f(name: &str, v: f32) -> onnx::AttributeProto {
    onnx::AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, v: &[i64]) -> onnx::AttributeProto {
    onnx::AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn attr_s(name: &str, v: &str) -> onnx::AttributeProto {
    onnx::AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec().into()),
        ..Default::default()
    }
}

/// A tensor value_info named `name` with `dtype` and `shape` (a symbolic dim as its dim
/// param; `None` leaves the element type or the shape out).
pub fn tensor_value_info(
    name: &str,
    dtype: Option<DType>,
    shape: Option<&crate::Shape>,
) -> onnx::ValueInfoProto {
    use onnx::tensor_shape_proto::{dimension::Value, Dimension};
    let shape = shape.map(|s| onnx::TensorShapeProto {
        dim: s
            .dims()
            .iter()
            .map(|d| Dimension {
                value: Some(match d {
                    crate::Dim::Known(k) => Value::DimValue(*k as i64),
                    other => Value::DimParam(other.to_string()),
                }),
                denotation: None,
            })
            .collect(),
    });
    onnx::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(onnx::TypeProto {
            value: Some(onnx::type_proto::Value::TensorType(
                onnx::type_proto::Tensor {
                    elem_type: dtype.map(DType::code),
                    shape,
                },
            )),
            denotation: None,
        }),
        ..Default::default()
    }
}

//! Attribute values on a [`Cur`]: scalars, strings, lists, references, tensors (`f32[2] [..]`)
//! and the kinds the text form prints as a count only (subgraphs, tensor lists, sparse
//! tensors, type protos), read back as that many empty entries.

use super::cursor::Cur;
use super::R;
use crate::dtype::DType;
use crate::onnx;
use crate::onnx::attribute_proto::AttributeType as AT;

impl Cur<'_> {
    /// `name=value`, the value as the printer writes it.
    pub(super) fn attr(&mut self) -> R<onnx::AttributeProto> {
        self.ws();
        let start = self.pos;
        let name = self.take(|c| !c.is_whitespace() && !"=,}".contains(c));
        if name.is_empty() {
            return Err(self.err_at(start, "an attribute name"));
        }
        self.expect("=")?;
        let mut a = onnx::AttributeProto {
            name: Some(name.to_string()),
            ..Default::default()
        };
        let mut typed = |t: AT| a.r#type = Some(t as i32);
        self.ws();
        let at = self.pos;
        let rest = self.rest();
        let starts_kw = |kw: &str| rest.starts_with(kw);
        if rest.starts_with('"') {
            typed(AT::String);
            a.s = Some(self.string()?.into_bytes().into());
        } else if rest.starts_with('[') {
            self.list(&mut a)?;
        } else if let Some(kind) = ["ints[]", "floats[]", "strings[]"]
            .into_iter()
            .find(|k| starts_kw(k))
        {
            self.pos += kind.len();
            typed(match kind {
                "ints[]" => AT::Ints,
                "floats[]" => AT::Floats,
                _ => AT::Strings,
            });
        } else if self.eat("@") {
            let r = self.take(|c| !c.is_whitespace() && !",}".contains(c));
            a.ref_attr_name = Some(r.to_string());
        } else if starts_kw("graph(") {
            self.pos += "graph(".len();
            let n: usize = self.number("a node count")?;
            self.expect("nodes")?;
            self.expect(")")?;
            typed(AT::Graph);
            a.g = Some(onnx::GraphProto {
                node: vec![Default::default(); n],
                ..Default::default()
            });
        } else if let Some(kw) = ["graphs(", "tensors("].into_iter().find(|k| starts_kw(k)) {
            self.pos += kw.len();
            let n: usize = self.number("a count")?;
            self.expect(")")?;
            if kw == "graphs(" {
                typed(AT::Graphs);
                a.graphs = vec![Default::default(); n];
            } else {
                typed(AT::Tensors);
                a.tensors = vec![Default::default(); n];
            }
        } else if starts_kw("tensor(?)") {
            self.pos += "tensor(?)".len();
            typed(AT::Tensor);
        } else if starts_kw("sparse") {
            self.pos += "sparse".len();
            typed(AT::SparseTensor);
        } else if starts_kw("type") && !starts_kw("type[") {
            self.pos += "type".len();
            typed(AT::TypeProto);
        } else if is_tensor_start(rest) {
            typed(AT::Tensor);
            a.t = Some(self.tensor_value()?);
        } else if rest.starts_with('?') {
            self.bump();
        } else {
            let tok = self.take(|c| !c.is_whitespace() && !",}".contains(c));
            if let Ok(i) = tok.parse::<i64>() {
                typed(AT::Int);
                a.i = Some(i);
            } else if let Ok(f) = tok.parse::<f32>() {
                typed(AT::Float);
                a.f = Some(f);
            } else {
                return Err(self.err_at(
                    at,
                    "an attribute value (1, 1.0, \"s\", [..], f32[2] [..], …)",
                ));
            }
        }
        Ok(a)
    }

    /// `[1, 2]`, `[1.0]`, `["a"]`: floats when any item is one (the printer writes every
    /// float with `.`, `e`, `NaN` or `inf`; hand-written integers among them are floats too).
    fn list(&mut self, a: &mut onnx::AttributeProto) -> R<()> {
        enum Item {
            Int(i64),
            Float(f32),
        }
        self.expect("[")?;
        let mut numbers = Vec::new();
        let mut strings = Vec::new();
        loop {
            self.ws();
            let at = self.pos;
            if self.peek() == Some('"') {
                strings.push(self.string()?);
            } else {
                let tok = self.take(|c| !c.is_whitespace() && !",]".contains(c));
                numbers.push(match (tok.parse::<i64>(), tok.parse::<f32>()) {
                    (Ok(i), _) => Item::Int(i),
                    (_, Ok(f)) => Item::Float(f),
                    _ => return Err(self.err_at(at, "a list item (1, 1.0 or \"s\")")),
                });
            }
            if !strings.is_empty() && !numbers.is_empty() {
                return Err(self.err_at(at, "items of one kind (strings or numbers)"));
            }
            if self.eat("]") {
                break;
            }
            self.expect(",")?;
        }
        if !strings.is_empty() {
            a.r#type = Some(AT::Strings as i32);
            a.strings = strings.into_iter().map(|s| s.into_bytes().into()).collect();
        } else if numbers.iter().any(|n| matches!(n, Item::Float(_))) {
            a.r#type = Some(AT::Floats as i32);
            a.floats = numbers
                .iter()
                .map(|n| match n {
                    Item::Int(i) => *i as f32,
                    Item::Float(f) => *f,
                })
                .collect();
        } else {
            a.r#type = Some(AT::Ints as i32);
            a.ints = numbers
                .iter()
                .filter_map(|n| match n {
                    Item::Int(i) => Some(*i),
                    Item::Float(_) => None,
                })
                .collect();
        }
        Ok(())
    }

    /// `f32[2, 3] [v, …]`.
    fn tensor_value(&mut self) -> R<onnx::TensorProto> {
        let dtype = self.dtype()?;
        self.expect("[")?;
        let mut dims = Vec::new();
        if !self.eat("]") {
            loop {
                dims.push(self.number("a tensor dim")?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
        }
        self.ws();
        let raw = if self.peek() == Some('[') {
            Some(self.values(dtype)?)
        } else {
            None
        };
        Ok(onnx::TensorProto {
            dims,
            data_type: dtype.map(DType::code),
            raw_data: raw.map(Into::into),
            ..Default::default()
        })
    }
}

/// A tensor value starts with a dtype name (or `?`) and `[`.
fn is_tensor_start(s: &str) -> bool {
    if s.starts_with("?[") {
        return true;
    }
    let name: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    DType::from_name(&name).is_some() && s[name.len()..].starts_with('[')
}

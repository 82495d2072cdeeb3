//! Text form → [`Graph`]: [`parse_graph`] reads what [`crate::print_graph`] writes, so that
//! print → parse → print is the identity, and test graphs are written as text.
//!
//! One fact a line, as the printer writes them (see its module doc); blank lines and lines
//! starting with `#` are skipped, and spaces between tokens are free:
//!
//! ```text
//! ir_version 10                                  (optional: 10 when absent)
//! opset ai.onnx 17                               (one per imported domain)
//! input %0 "x": f32[batch,4]                     (a graph input)
//! input+init %1 "s": f32[] = [0.5]               (an initializer also listed as an input)
//! init %2 "w": f32[4,4] = [..]                   (up to 8 values; none: type only)
//! init %3 "e": f32[4] external("w.bin", offset=0, length=16)
//! %4 "h": f32[batch,4] = MatMul(%0, %2) {transB=0}  # n0 "mm" [forward]
//! %5 "y": ?[?], _ = com.microsoft::Op(%4, _)     (`_`: an omitted optional slot)
//! output %4 "h"                                  (the name is optional and checked)
//! ```
//!
//! Rules:
//! - `%N` numbers a tensor once, on the line that defines it; a node may read only tensors
//!   of earlier lines, and nodes are in file order as written. The numbers need not be dense:
//!   tensor ids are given in line order, so a printed graph reads back with the same numbers.
//! - dtype `?` is unknown, shape `[?]` an unknown rank; a dim is a number, a symbol (any
//!   characters but `,[]()*+` and space: `seq`, `?1`) or a parenthesised polynomial
//!   (`(2*batch*seq + 4)`) as the shape printer writes it.
//! - Attributes: `1` int, `1.0` float (Rust's float form: `1e-5`, `NaN`, `inf`), `"s"` string,
//!   `[1, 2]` ints, `[1.0]` floats, `["a"]` strings, `ints[]`/`floats[]`/`strings[]` empty
//!   lists, `f32[2, 3] [..]` a tensor (values as for initializers), `@name` a reference to a
//!   function attribute, `?` untyped. Subgraphs, tensor lists, sparse tensors and type protos
//!   print as a count or kind only (`graph(3 nodes)`, `tensors(2)`, `sparse`, `type`) and
//!   read back as that many empty entries: the text form is not meant for them.
//! - The comment after a node gives its id (`n7`) and name; both are optional, and the
//!   rest of the line (a phase note) is ignored. Ids written must be distinct and below the
//!   node count; unwritten ones take the smallest free ids in line order.
//! - A parsed graph keeps the values that were printed and no others: planning needs types
//!   only; a model to run needs every constant it reads printed (small ones are).

use std::collections::{HashMap, HashSet};

use crate::dtype::DType;
use crate::graph::{normalise_domain, Graph, InitData, Node, NodeOrigin, Tensor, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::onnx::attribute_proto::AttributeType as AT;
use crate::shape::{Dim, Shape};

/// Why text is not a graph: where (1-based line and column, in characters), what the parser
/// expected there, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: expected {expected}, found {found}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub expected: String,
    pub found: String,
}

/// Read the text form of a graph.
pub fn parse_graph(text: &str) -> Result<Graph, ParseError> {
    let mut p = Parser::default();
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        last = i + 1;
        let mut c = Cur {
            line: i + 1,
            text: line,
            pos: 0,
        };
        c.ws();
        if c.at_end() || c.peek() == Some('#') {
            continue;
        }
        p.line(&mut c)?;
    }
    p.finish(last + 1)
}

/// A cursor on one line.
struct Cur<'a> {
    line: usize,
    text: &'a str,
    pos: usize,
}

type R<T> = Result<T, ParseError>;

impl<'a> Cur<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn at_end(&self) -> bool {
        self.rest().is_empty()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) {
        if let Some(ch) = self.peek() {
            self.pos += ch.len_utf8();
        }
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn err(&self, expected: impl Into<String>) -> ParseError {
        self.err_at(self.pos, expected)
    }

    fn err_at(&self, pos: usize, expected: impl Into<String>) -> ParseError {
        let rest = &self.text[pos..];
        let found = if rest.is_empty() {
            "the end of the line".to_string()
        } else {
            let token: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace())
                .take(24)
                .collect();
            format!("`{token}`")
        };
        ParseError {
            line: self.line,
            column: self.text[..pos].chars().count() + 1,
            expected: expected.into(),
            found,
        }
    }

    /// Skip spaces, then `s` if it comes next.
    fn eat(&mut self, s: &str) -> bool {
        self.ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> R<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.err(format!("`{s}`")))
        }
    }

    /// The longest run of characters satisfying `ok` (after spaces).
    fn take(&mut self, ok: impl Fn(char) -> bool) -> &'a str {
        self.ws();
        let start = self.pos;
        while self.peek().is_some_and(&ok) {
            self.bump();
        }
        &self.text[start..self.pos]
    }

    fn word(&mut self) -> &'a str {
        self.take(|c| c.is_alphanumeric() || "_.+:-".contains(c))
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> R<T> {
        self.ws();
        let start = self.pos;
        let tok = self.take(|c| c.is_ascii_digit() || c == '-');
        tok.parse().map_err(|_| self.err_at(start, what))
    }

    fn end(&mut self) -> R<()> {
        self.ws();
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err("the end of the line"))
        }
    }

    /// A string as Rust's `{:?}` writes it.
    fn string(&mut self) -> R<String> {
        self.ws();
        let start = self.pos;
        if self.peek() != Some('"') {
            return Err(self.err("a quoted name"));
        }
        self.bump();
        let mut s = String::new();
        loop {
            let Some(ch) = self.peek() else {
                return Err(self.err_at(start, "a string closed by `\"`"));
            };
            self.bump();
            match ch {
                '"' => return Ok(s),
                '\\' => {
                    let esc = self.pos;
                    let e = self.peek();
                    self.bump();
                    match e {
                        Some('n') => s.push('\n'),
                        Some('r') => s.push('\r'),
                        Some('t') => s.push('\t'),
                        Some('0') => s.push('\0'),
                        Some(c @ ('\\' | '"' | '\'')) => s.push(c),
                        Some('u') if self.eat("{") => {
                            let hex = self.take(|c| c.is_ascii_hexdigit());
                            let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                            match (c, self.eat("}")) {
                                (Some(c), true) => s.push(c),
                                _ => return Err(self.err_at(esc, "a `\\u{…}` escape")),
                            }
                        }
                        _ => return Err(self.err_at(esc, "an escape (\\n, \\\", \\u{…}, …)")),
                    }
                }
                c => s.push(c),
            }
        }
    }

    /// `%N`, returning N and where it started.
    fn tref(&mut self) -> R<(usize, usize)> {
        self.ws();
        let start = self.pos;
        if !self.eat("%") {
            return Err(self.err("a tensor `%N`"));
        }
        if self.peek() == Some('?') {
            return Err(self.err_at(
                start,
                "a tensor defined on an earlier line (`%?\"name\"` is one read before it is computed)",
            ));
        }
        let n = self.take(|c| c.is_ascii_digit());
        n.parse()
            .map(|n| (n, start))
            .map_err(|_| self.err_at(start, "a tensor `%N`"))
    }

    /// `f32[8,seq]`, `?[?]`.
    fn ty(&mut self) -> R<(Option<DType>, Option<Shape>)> {
        let dtype = self.dtype()?;
        self.ws();
        if self.rest().starts_with("[?]") {
            self.pos += 3;
            return Ok((dtype, None));
        }
        self.expect("[")?;
        let mut dims = Vec::new();
        if !self.eat("]") {
            loop {
                dims.push(self.dim()?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
        }
        Ok((dtype, Some(Shape(dims))))
    }

    fn dtype(&mut self) -> R<Option<DType>> {
        if self.eat("?") {
            return Ok(None);
        }
        let start = self.pos;
        let name = self.take(|c| c.is_ascii_alphanumeric());
        DType::from_name(name)
            .map(Some)
            .ok_or_else(|| self.err_at(start, "a dtype (f32, i64, bool, …, or `?`)"))
    }

    fn dim(&mut self) -> R<Dim> {
        if self.eat("(") {
            let d = self.poly()?;
            self.expect(")")?;
            return Ok(d);
        }
        self.factor()
    }

    /// `2*batch*seq + 4`, `-seq + 1`.
    fn poly(&mut self) -> R<Dim> {
        let neg = self.eat("-");
        let first = self.term()?;
        let mut acc = if neg {
            Dim::Known(0).sub(&first)
        } else {
            first
        };
        loop {
            if self.eat("+") {
                acc = acc.add(&self.term()?);
            } else if self.eat("-") {
                acc = acc.sub(&self.term()?);
            } else {
                return Ok(acc);
            }
        }
    }

    fn term(&mut self) -> R<Dim> {
        let mut acc = self.factor()?;
        while self.eat("*") {
            acc = acc.mul(&self.factor()?);
        }
        Ok(acc)
    }

    fn factor(&mut self) -> R<Dim> {
        self.ws();
        let start = self.pos;
        let tok = self.take(|c| !c.is_whitespace() && !",[]()*+".contains(c));
        if tok.is_empty() {
            return Err(self.err("a dim (a number, a symbol or a `(…)` expression)"));
        }
        if tok.chars().all(|c| c.is_ascii_digit()) {
            return tok
                .parse()
                .map(Dim::Known)
                .map_err(|_| self.err_at(start, "a dim that fits in 64 bits"));
        }
        Ok(Dim::sym(tok))
    }

    /// `[v, …]` for a tensor of `dtype`, as little-endian raw bytes.
    fn values(&mut self, dtype: Option<DType>) -> R<Vec<u8>> {
        self.ws();
        let start = self.pos;
        self.expect("[")?;
        let mut raw = Vec::new();
        loop {
            self.ws();
            let at = self.pos;
            let tok = self.take(|c| !c.is_whitespace() && !",]".contains(c));
            let bad = |c: &Cur, what: &str| c.err_at(at, what);
            match dtype {
                Some(DType::F32) => {
                    let v: f32 = tok.parse().map_err(|_| bad(self, "an f32 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::I64) => {
                    let v: i64 = tok.parse().map_err(|_| bad(self, "an i64 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::I32) => {
                    let v: i32 = tok.parse().map_err(|_| bad(self, "an i32 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::Bool) => match tok {
                    "true" => raw.push(1),
                    "false" => raw.push(0),
                    _ => return Err(bad(self, "`true` or `false`")),
                },
                _ => {
                    return Err(self.err_at(start, "values only for f32, i64, i32 and bool tensors"))
                }
            }
            if self.eat("]") {
                return Ok(raw);
            }
            self.expect(",")?;
        }
    }

    fn attr(&mut self) -> R<onnx::AttributeProto> {
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

/// A node line, before node ids are settled.
struct PendingNode {
    line: usize,
    /// The id written in its comment, and its column.
    id: Option<(usize, usize)>,
    node: Node,
}

#[derive(Default)]
struct Parser {
    ir_version: Option<i64>,
    opsets: Vec<onnx::OperatorSetIdProto>,
    tensors: Vec<Tensor>,
    by_num: HashMap<usize, TensorId>,
    names: HashSet<String>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    initializers: Vec<onnx::TensorProto>,
    nodes: Vec<PendingNode>,
}

impl Parser {
    fn line(&mut self, c: &mut Cur) -> R<()> {
        if matches!(c.peek(), Some('%' | '=' | '_')) {
            return self.node(c);
        }
        let start = c.pos;
        match c.word() {
            "ir_version" => {
                self.ir_version = Some(c.number("an IR version")?);
                c.end()
            }
            "opset" => {
                let d = c.take(|ch| !ch.is_whitespace());
                if d.is_empty() {
                    return Err(c.err("a domain"));
                }
                let v = c.number("an opset version")?;
                let d = normalise_domain(d);
                self.opsets.push(onnx::OperatorSetIdProto {
                    domain: Some(if d == crate::ONNX_DOMAIN {
                        String::new()
                    } else {
                        d
                    }),
                    version: Some(v),
                });
                c.end()
            }
            kw @ ("input" | "input+init" | "init") => {
                let (num, at) = c.tref()?;
                let name = c.string()?;
                c.expect(":")?;
                let (dtype, shape) = c.ty()?;
                let mut proto = onnx::TensorProto {
                    name: Some(name.clone()),
                    data_type: dtype.map(DType::code),
                    dims: shape
                        .iter()
                        .flat_map(|s| s.dims())
                        .map(|d| d.known().map_or(0, |k| k as i64))
                        .collect(),
                    ..Default::default()
                };
                let mut data = InitData::Embedded;
                if kw != "input" {
                    if kw == "init" && c.eat("external(") {
                        let location = c.string()?;
                        c.expect(",")?;
                        c.expect("offset=")?;
                        let offset: u64 = c.number("an offset")?;
                        c.expect(",")?;
                        c.expect("length=")?;
                        let length: Option<u64> = if c.eat("?") {
                            None
                        } else {
                            Some(c.number("a length or `?`")?)
                        };
                        c.expect(")")?;
                        proto.data_location =
                            Some(onnx::tensor_proto::DataLocation::External as i32);
                        let mut entry = |k: &str, v: String| {
                            proto.external_data.push(onnx::StringStringEntryProto {
                                key: Some(k.to_string()),
                                value: Some(v),
                            })
                        };
                        entry("location", location.clone());
                        entry("offset", offset.to_string());
                        if let Some(l) = length {
                            entry("length", l.to_string());
                        }
                        data = InitData::External {
                            location,
                            offset,
                            length,
                        };
                    } else if c.eat("=") {
                        proto.raw_data = Some(c.values(dtype)?.into());
                    }
                }
                c.end()?;
                let source = match kw {
                    "input" => TensorSource::GraphInput,
                    _ => TensorSource::Initializer {
                        data,
                        overridable: kw == "input+init",
                    },
                };
                let id = self.define(c, num, at, name, dtype, shape, source)?;
                if kw != "init" {
                    self.inputs.push(id);
                }
                if kw != "input" {
                    self.initializers.push(proto);
                }
                Ok(())
            }
            "output" => {
                let (num, at) = c.tref()?;
                let id = self.get(c, num, at)?;
                c.ws();
                if c.peek() == Some('"') {
                    let name_at = c.pos;
                    let name = c.string()?;
                    if name != self.tensors[id.index()].name {
                        return Err(c.err_at(
                            name_at,
                            format!("the name of %{num}, {:?}", self.tensors[id.index()].name),
                        ));
                    }
                }
                c.end()?;
                self.tensors[id.index()].is_output = true;
                self.outputs.push(id);
                Ok(())
            }
            _ => Err(c.err_at(
                start,
                "a line: ir_version, opset, input, input+init, init, output or a node `%N \"name\": type = Op(…)`",
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn define(
        &mut self,
        c: &Cur,
        num: usize,
        at: usize,
        name: String,
        dtype: Option<DType>,
        shape: Option<Shape>,
        source: TensorSource,
    ) -> R<TensorId> {
        if self.by_num.contains_key(&num) {
            return Err(c.err_at(at, format!("a tensor number not used above (%{num} is)")));
        }
        if !self.names.insert(name.clone()) {
            return Err(c.err_at(at, format!("a tensor name not used above ({name:?} is)")));
        }
        let id = TensorId::from_index(self.tensors.len());
        self.tensors.push(Tensor {
            name,
            dtype,
            shape,
            source,
            is_output: false,
            consumers: Vec::new(),
        });
        self.by_num.insert(num, id);
        Ok(id)
    }

    fn get(&self, c: &Cur, num: usize, at: usize) -> R<TensorId> {
        self.by_num.get(&num).copied().ok_or_else(|| {
            c.err_at(
                at,
                format!("a tensor defined on an earlier line (%{num} is not)"),
            )
        })
    }

    fn node(&mut self, c: &mut Cur) -> R<()> {
        let line = c.line;
        let mut defs = Vec::new();
        c.ws();
        if c.peek() != Some('=') {
            loop {
                if c.eat("_") {
                    defs.push(None);
                } else {
                    let (num, at) = c.tref()?;
                    let name = c.string()?;
                    c.expect(":")?;
                    let (dtype, shape) = c.ty()?;
                    defs.push(Some((num, at, name, dtype, shape)));
                }
                if !c.eat(",") {
                    break;
                }
            }
        }
        c.expect("=")?;
        c.ws();
        let op_at = c.pos;
        let label = c.take(|ch| ch.is_alphanumeric() || "_.:".contains(ch));
        let (domain, op_type) = match label.rsplit_once("::") {
            Some((d, o)) => (d, o),
            None => ("", label),
        };
        if op_type.is_empty() {
            return Err(c.err_at(op_at, "an op (`MatMul`, `com.microsoft::Op`)"));
        }
        c.expect("(")?;
        let mut inputs = Vec::new();
        if !c.eat(")") {
            loop {
                if c.eat("_") {
                    inputs.push(None);
                } else {
                    let (num, at) = c.tref()?;
                    inputs.push(Some(self.get(c, num, at)?));
                }
                if c.eat(")") {
                    break;
                }
                c.expect(",")?;
            }
        }
        let mut attribute = Vec::new();
        if c.eat("{") {
            loop {
                attribute.push(c.attr()?);
                if c.eat("}") {
                    break;
                }
                c.expect(",")?;
            }
        }
        let mut id = None;
        let mut name = String::new();
        if c.eat("#") {
            c.ws();
            let at = c.pos;
            if c.rest().starts_with('n')
                && c.rest()[1..].starts_with(|ch: char| ch.is_ascii_digit())
            {
                c.bump();
                let column = c.text[..at].chars().count() + 1;
                id = Some((c.number("a node id `nN`")?, column));
            }
            c.ws();
            if c.peek() == Some('"') {
                name = c.string()?;
            }
        } else {
            c.end()?;
        }
        // Outputs are defined after the inputs are read: a node cannot read its own output.
        let mut outputs = Vec::new();
        for d in defs {
            outputs.push(match d {
                None => None,
                Some((num, at, tname, dtype, shape)) => {
                    Some(self.define(c, num, at, tname, dtype, shape, TensorSource::GraphInput)?)
                }
            });
        }
        let dom = normalise_domain(domain);
        let names = |v: &[Option<TensorId>], t: &[Tensor]| -> Vec<String> {
            v.iter()
                .map(|x| x.map_or_else(String::new, |x| t[x.index()].name.clone()))
                .collect()
        };
        let proto = onnx::NodeProto {
            input: names(&inputs, &self.tensors),
            output: names(&outputs, &self.tensors),
            name: (!name.is_empty()).then(|| name.clone()),
            op_type: Some(op_type.to_string()),
            domain: Some(if dom == crate::ONNX_DOMAIN {
                String::new()
            } else {
                dom.clone()
            }),
            attribute,
            ..Default::default()
        };
        self.nodes.push(PendingNode {
            line,
            id,
            node: Node {
                name,
                domain: dom,
                op_type: op_type.to_string(),
                inputs,
                outputs,
                origin: NodeOrigin::Imported,
                proto: std::sync::Arc::new(proto),
                def: Default::default(),
            },
        });
        Ok(())
    }

    fn finish(self, end_line: usize) -> R<Graph> {
        let count = self.nodes.len();
        // Settle node ids: written ones, then the smallest free ones in line order.
        let mut slot: Vec<Option<usize>> = vec![None; count];
        for (i, pn) in self.nodes.iter().enumerate() {
            if let Some((id, column)) = pn.id {
                if id >= count || slot[id].is_some() {
                    return Err(ParseError {
                        line: pn.line,
                        column,
                        expected: format!(
                            "a node id below the node count {count}, used by no other line"
                        ),
                        found: format!("`n{id}`"),
                    });
                }
                slot[id] = Some(i);
            }
        }
        let mut free = (0..count)
            .filter(|&k| slot[k].is_none())
            .collect::<Vec<_>>()
            .into_iter();
        let mut ids = vec![0usize; count];
        for (i, pn) in self.nodes.iter().enumerate() {
            ids[i] = match pn.id {
                Some((id, _)) => id,
                None => free.next().unwrap_or(0),
            };
            slot[ids[i]] = Some(i);
        }
        let model = onnx::ModelProto {
            ir_version: Some(self.ir_version.unwrap_or(10)),
            opset_import: self.opsets,
            graph: Some(onnx::GraphProto {
                name: Some("g".into()),
                input: self
                    .inputs
                    .iter()
                    .map(|&t| value_info(&self.tensors[t.index()]))
                    .collect(),
                output: self
                    .outputs
                    .iter()
                    .map(|&t| value_info(&self.tensors[t.index()]))
                    .collect(),
                initializer: self.initializers,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut graph = Graph {
            model: std::sync::Arc::new(model),
            model_decls: Default::default(),
            g: Default::default(),
            tensors: Vec::new(),
            by_name: Default::default(),
            added_names: HashMap::new(),
            order: Vec::new(),
            inputs: self.inputs,
            outputs: self.outputs,
            added_value_info: Vec::new(),
            dir: None,
        };
        for t in self.tensors {
            graph.add_tensor(t);
        }
        let mut nodes: Vec<Option<PendingNode>> = self.nodes.into_iter().map(Some).collect();
        let mut inputs: Vec<Vec<Option<TensorId>>> = vec![Vec::new(); count];
        for (k, s) in slot.iter().enumerate() {
            let Some(pn) = s.and_then(|i| nodes[i].take()) else {
                continue;
            };
            let mut node = pn.node;
            inputs[k] = std::mem::take(&mut node.inputs);
            let id = graph.add_node(node);
            debug_assert_eq!(id.index(), k);
        }
        for &k in &ids {
            let id = NodeId::from_index(k);
            for &t in inputs[k].iter().flatten() {
                graph.connect(t, id);
            }
            graph.node_mut(id).inputs = std::mem::take(&mut inputs[k]);
            graph.order.push(id);
        }
        crate::verify(&graph).map_err(|e| ParseError {
            line: end_line,
            column: 1,
            expected: "a valid graph".to_string(),
            found: e.to_string(),
        })?;
        Ok(graph)
    }
}

/// The value_info of a graph input or output, as typed in the text.
fn value_info(t: &Tensor) -> onnx::ValueInfoProto {
    crate::build::tensor_value_info(&t.name, t.dtype, t.shape.as_ref())
}

//! Which element types ONNX Runtime has a kernel for, per op, on a provider: the table
//! `ort_kernels_cpu.tsv`, generated from ONNX Runtime 1.31.1's own kernel registrations
//! (`scripts/ort_kernels.py`; `ir/tests/ort_kernels.rs` checks it against the installed
//! onnxruntime).
//!
//! A node has a kernel when one registration of its (domain, op) covers its opset version and
//! every type constraint of that registration admits the node's type for it. A constraint
//! names a type parameter (`T`) or a formal parameter (`shape`); it binds to the first actual
//! input, then output, whose formal parameter carries that name, as ORT's `VerifyKernelDef`
//! resolves it. A constraint whose parameters are all absent (omitted optional inputs) is
//! satisfied.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::dtype::DType;

/// The execution providers the registry knows kernels for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Cpu,
}

/// A type as ONNX names it in a type constraint (`tensor(float16)` → `float16`).
pub fn onnx_type_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::U16 => "uint16",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::String => "string",
        DType::Bool => "bool",
        DType::F16 => "float16",
        DType::F64 => "double",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
        DType::BF16 => "bfloat16",
        DType::F8E4M3FN => "float8e4m3fn",
        DType::F8E4M3FNUZ => "float8e4m3fnuz",
        DType::F8E5M2 => "float8e5m2",
        DType::F8E5M2FNUZ => "float8e5m2fnuz",
        DType::U4 => "uint4",
        DType::I4 => "int4",
        DType::F4E2M1 => "float4e2m1",
    }
}

#[derive(Debug)]
struct Kernel {
    start: i64,
    end: i64,
    /// (constraint name, admitted type names).
    constraints: Vec<(String, Vec<String>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arity {
    Single,
    Optional,
    Variadic,
}

#[derive(Debug)]
struct Formal {
    name: String,
    type_str: String,
    arity: Arity,
}

#[derive(Debug)]
struct Schema {
    since: i64,
    inputs: Vec<Formal>,
    outputs: Vec<Formal>,
}

#[derive(Debug, Default)]
struct Entry {
    kernels: Vec<Kernel>,
    /// By `since`, ascending.
    schemas: Vec<Schema>,
}

/// One provider's kernels, by (domain, op).
#[derive(Debug, Default)]
pub struct KernelTable {
    ops: HashMap<(String, String), Entry>,
}

/// The types of one node's actual inputs and outputs (`None`: omitted, or of unknown type).
#[derive(Clone, Copy, Debug)]
pub struct NodeTypes<'a> {
    pub inputs: &'a [Option<DType>],
    pub outputs: &'a [Option<DType>],
}

fn formals(field: &str) -> Vec<Formal> {
    if field.is_empty() {
        return Vec::new();
    }
    field
        .split(',')
        .filter_map(|f| {
            let mut p = f.splitn(3, ':');
            let (name, ty, arity) = (p.next()?, p.next()?, p.next()?);
            let arity = match arity {
                "o" => Arity::Optional,
                "v" => Arity::Variadic,
                _ => Arity::Single,
            };
            Some(Formal {
                name: name.to_string(),
                type_str: ty.to_string(),
                arity,
            })
        })
        .collect()
}

impl KernelTable {
    /// Parse the table's text (see the module doc); malformed lines are skipped, which the
    /// table's test would show as a mismatch against ORT.
    fn parse(text: &str) -> KernelTable {
        let mut t = KernelTable::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split('\t').collect();
            let key = |i: usize, j: usize| (f[i].to_string(), f[j].to_string());
            match (f.first().copied(), f.len()) {
                (Some("K"), 6) => {
                    let (Ok(start), Ok(end)) = (f[3].parse(), f[4].parse()) else {
                        continue;
                    };
                    let constraints = f[5]
                        .split(';')
                        .filter(|c| !c.is_empty())
                        .filter_map(|c| c.split_once('='))
                        .map(|(n, ts)| (n.to_string(), ts.split(',').map(str::to_string).collect()))
                        .collect();
                    t.ops.entry(key(1, 2)).or_default().kernels.push(Kernel {
                        start,
                        end,
                        constraints,
                    });
                }
                (Some("S"), 6) => {
                    let Ok(since) = f[3].parse() else { continue };
                    t.ops.entry(key(1, 2)).or_default().schemas.push(Schema {
                        since,
                        inputs: formals(f[4]),
                        outputs: formals(f[5]),
                    });
                }
                _ => {}
            }
        }
        for e in t.ops.values_mut() {
            e.schemas.sort_by_key(|s| s.since);
        }
        t
    }

    /// The table of `provider` under ONNX Runtime `ort_version`, when the registry has it
    /// (ONNX Runtime 1.31.1's CPU provider).
    pub fn of(provider: Provider, ort_version: &str) -> Option<&'static KernelTable> {
        static CPU: OnceLock<KernelTable> = OnceLock::new();
        match provider {
            Provider::Cpu if ort_version == crate::ort::ORT_VERSION => {
                Some(CPU.get_or_init(|| KernelTable::parse(include_str!("ort_kernels_cpu.tsv"))))
            }
            Provider::Cpu => None,
        }
    }

    /// Whether (domain, op) has any kernel at all.
    pub fn knows(&self, domain: &str, op: &str) -> bool {
        self.ops.contains_key(&(domain.to_string(), op.to_string()))
    }

    /// Whether a node of (domain, op) at opset `opset` with `types` has a kernel.
    pub fn has_kernel(&self, domain: &str, op: &str, opset: i64, types: NodeTypes) -> bool {
        let Some(e) = self.ops.get(&(domain.to_string(), op.to_string())) else {
            return false;
        };
        let Some(schema) = e.schemas.iter().rev().find(|s| s.since <= opset) else {
            return false;
        };
        e.kernels
            .iter()
            .filter(|k| k.start <= opset && opset <= k.end)
            .any(|k| {
                k.constraints
                    .iter()
                    .all(|(name, admitted)| match resolve(schema, types, name) {
                        Some(d) => admitted.iter().any(|a| a == onnx_type_name(d)),
                        None => true,
                    })
            })
    }
}

/// One formal parameter of an op's schema: its type string (a type parameter such as `T`, or
/// a fixed type such as `tensor(int64)`) and whether it is variadic.
#[derive(Clone, Copy, Debug)]
pub struct FormalView<'a> {
    pub type_str: &'a str,
    pub variadic: bool,
}

/// The schema of an op at an opset: the version it is defined since, and its formals.
#[derive(Clone, Debug)]
pub struct SchemaView<'a> {
    pub since: i64,
    pub inputs: Vec<FormalView<'a>>,
    pub outputs: Vec<FormalView<'a>>,
}

fn formal_views(f: &[Formal]) -> Vec<FormalView<'_>> {
    f.iter()
        .map(|f| FormalView {
            type_str: &f.type_str,
            variadic: f.arity == Arity::Variadic,
        })
        .collect()
}

/// Whether a formal's type string names a type parameter (`T`, `T1`), not a fixed type.
pub fn is_type_param(type_str: &str) -> bool {
    !type_str.contains('(')
}

impl KernelTable {
    /// The schema a node of (domain, op) at opset `opset` binds to.
    pub fn schema(&self, domain: &str, op: &str, opset: i64) -> Option<SchemaView<'_>> {
        let e = self.ops.get(&(domain.to_string(), op.to_string()))?;
        let s = e.schemas.iter().rev().find(|s| s.since <= opset)?;
        Some(SchemaView {
            since: s.since,
            inputs: formal_views(&s.inputs),
            outputs: formal_views(&s.outputs),
        })
    }

    /// ORT's lookup by explicit type parameters (`TryFindKernel` with a type map): a kernel of
    /// (domain, op) whose version range holds `version` and that constrains every parameter in
    /// `bound` to admit its type.
    pub fn has_kernel_for(
        &self,
        domain: &str,
        op: &str,
        version: i64,
        bound: &[(&str, DType)],
    ) -> bool {
        let Some(e) = self.ops.get(&(domain.to_string(), op.to_string())) else {
            return false;
        };
        e.kernels
            .iter()
            .filter(|k| k.start <= version && version <= k.end)
            .any(|k| {
                bound.iter().all(|(name, d)| {
                    k.constraints
                        .iter()
                        .find(|(n, _)| n == name)
                        .is_some_and(|(_, admitted)| {
                            admitted.iter().any(|a| a == onnx_type_name(*d))
                        })
                })
            })
    }
}

/// The type bound to constraint `name` in a node of `schema`: the first actual input, then
/// output, present and typed, whose formal parameter has that type string or name.
fn resolve(schema: &Schema, types: NodeTypes, name: &str) -> Option<DType> {
    let matches = |f: &Formal| f.type_str == name || f.name == name;
    let mut actual = 0usize;
    for (i, f) in schema.inputs.iter().enumerate() {
        let count = match f.arity {
            // A variadic formal (the last) takes every remaining actual input.
            Arity::Variadic if i + 1 == schema.inputs.len() => {
                types.inputs.len().saturating_sub(actual)
            }
            _ => 1,
        };
        if matches(f) {
            if let Some(d) = types
                .inputs
                .iter()
                .skip(actual)
                .take(count)
                .flatten()
                .next()
            {
                return Some(*d);
            }
        }
        actual += count;
    }
    let last = schema.outputs.len().checked_sub(1)?;
    for (i, ty) in types.outputs.iter().enumerate() {
        if matches(&schema.outputs[i.min(last)]) {
            if let Some(d) = ty {
                return Some(*d);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> &'static KernelTable {
        KernelTable::of(Provider::Cpu, crate::ort::ORT_VERSION).unwrap()
    }

    fn has(op: &str, opset: i64, ins: &[Option<DType>], outs: &[Option<DType>]) -> bool {
        cpu().has_kernel(
            "ai.onnx",
            op,
            opset,
            NodeTypes {
                inputs: ins,
                outputs: outs,
            },
        )
    }

    #[test]
    fn cpu_matmul_has_float_not_half() {
        let f = Some(DType::F32);
        let h = Some(DType::F16);
        let b = Some(DType::BF16);
        assert!(has("MatMul", 17, &[f, f], &[f]));
        assert!(!has("MatMul", 17, &[h, h], &[h]));
        assert!(!has("MatMul", 17, &[b, b], &[b]));
    }

    #[test]
    fn cast_binds_input_and_output_constraints() {
        let (h, f, i) = (Some(DType::F16), Some(DType::F32), Some(DType::I64));
        assert!(has("Cast", 19, &[h], &[f]));
        assert!(has("Cast", 19, &[f], &[h]));
        assert!(has("Cast", 19, &[i], &[f]));
    }

    #[test]
    fn omitted_optional_inputs_do_not_bind() {
        // LayerNormalization-17: X, Scale, optional B (T); Mean, InvStdDev (U) optional outputs.
        let f = Some(DType::F32);
        assert!(has(
            "LayerNormalization",
            17,
            &[f, f, None],
            &[f, None, None]
        ));
    }

    #[test]
    fn unknown_ops_have_no_kernel() {
        assert!(!cpu().knows("ai.onnx", "NoSuchOp"));
        assert!(!has("NoSuchOp", 17, &[], &[]));
    }
}

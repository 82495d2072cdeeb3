//! Seeded input generation. The generator is written here (splitmix64 seeding xoshiro256**, Box–Muller for
//! normals) so the same seed gives the same bits whatever crate versions are in the lock file.

use std::collections::BTreeMap;

use crate::error::{Result, RuntimeError};
use crate::session::InputSpec;
use crate::tensor::{DType, HostTensor};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Distribution {
    /// Normal with mean 0; float dtypes only.
    Normal {
        std: f64,
    },
    /// Uniform integers in `lo..hi` (half-open, as numpy's `randint`); any dtype that holds them.
    IntRange {
        lo: i64,
        hi: i64,
    },
    Ones,
    Zeros,
}

impl Distribution {
    /// What [`generate_inputs`] fills an input with when nobody says otherwise: floats N(0, 1); integers 0 or 1
    /// (a valid index and class label for any vocabulary or class count >= 2); bools all true (masks keep all).
    pub fn default_for(dtype: DType) -> Distribution {
        match dtype {
            d if d.is_float() => Distribution::Normal { std: 1.0 },
            DType::Bool => Distribution::Ones,
            _ => Distribution::IntRange { lo: 0, hi: 2 },
        }
    }
}

/// One tensor per model input: the one in `given` of that name if any, else generated with
/// [`Distribution::default_for`] and seed [`derive_seed`]`(seed, name)`. Symbolic dims take their value from `dims`.
/// A given tensor that is not an input, or a symbolic dim without a value, is an error naming it.
pub fn generate_inputs(
    specs: &[InputSpec],
    dims: &BTreeMap<String, usize>,
    seed: u64,
    given: &[HostTensor],
) -> Result<Vec<HostTensor>> {
    if let Some(stray) = given
        .iter()
        .find(|t| !specs.iter().any(|s| s.name == t.name))
    {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        return Err(RuntimeError::Generate {
            tensor: stray.name.clone(),
            message: format!(
                "given, but not an input of the model (inputs: {})",
                names.join(", ")
            ),
        });
    }
    specs
        .iter()
        .map(|spec| {
            if let Some(t) = given.iter().find(|t| t.name == spec.name) {
                return Ok(t.clone());
            }
            let shape = spec
                .shape
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Some(n) => Ok(*n),
                    None => {
                        let sym = spec.dim_names.get(i).map(String::as_str).unwrap_or_default();
                        dims.get(sym).copied().ok_or_else(|| RuntimeError::Generate {
                            tensor: spec.name.clone(),
                            message: if sym.is_empty() {
                                format!("dimension {i} is unnamed and unknown; give this input as a .npy file")
                            } else {
                                format!("dimension `{sym}` has no value; pass --dim {sym}=N")
                            },
                        })
                    }
                })
                .collect::<Result<Vec<usize>>>()?;
            generate(&spec.name, spec.dtype, &shape, Distribution::default_for(spec.dtype), derive_seed(seed, &spec.name))
        })
        .collect()
}

/// Fills a tensor of `dtype` and `shape` from `dist`, seeded with `seed`.
pub fn generate(
    name: &str,
    dtype: DType,
    shape: &[usize],
    dist: Distribution,
    seed: u64,
) -> Result<HostTensor> {
    let fail = |message: String| RuntimeError::Generate {
        tensor: name.to_string(),
        message,
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| fail(format!("shape {shape:?} overflows")))?;
    let mut rng = Xoshiro256::seeded(seed);
    let mut data = Vec::with_capacity(n * dtype.size());
    match dist {
        Distribution::Zeros => data.resize(n * dtype.size(), 0),
        Distribution::Ones => {
            for _ in 0..n {
                put(&mut data, dtype, 1.0);
            }
        }
        Distribution::Normal { std } => {
            if !dtype.is_float() {
                return Err(fail(format!(
                    "Normal needs a float dtype, `{name}` is {dtype}; use IntRange"
                )));
            }
            if !(std.is_finite() && std >= 0.0) {
                return Err(fail(format!(
                    "Normal std must be finite and >= 0, got {std}"
                )));
            }
            let mut i = 0;
            while i < n {
                let (z0, z1) = rng.normal_pair();
                put(&mut data, dtype, z0 * std);
                if i + 1 < n {
                    put(&mut data, dtype, z1 * std);
                }
                i += 2;
            }
        }
        Distribution::IntRange { lo, hi } => {
            if hi <= lo {
                return Err(fail(format!("IntRange needs lo < hi, got {lo}..{hi}")));
            }
            let (min, max) = int_limits(dtype);
            if (lo as i128) < min || (hi as i128 - 1) > max {
                return Err(fail(format!("IntRange {lo}..{hi} does not fit {dtype}")));
            }
            let span = (hi as i128 - lo as i128) as u128;
            for _ in 0..n {
                let offset = ((rng.next_u64() as u128 * span) >> 64) as i128;
                put_int(&mut data, dtype, lo as i128 + offset);
            }
        }
    }
    HostTensor::from_bytes(name, dtype, shape.to_vec(), data)
}

/// A per-tensor seed from a run seed and the tensor's name, so inputs differ from each other but not between runs.
pub fn derive_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(&mut (seed ^ h))
}

fn int_limits(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::U16 => (0, u16::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::I64 | DType::U64 => (i64::MIN as i128, i64::MAX as i128),
        // Floats hold integers exactly up to 2^(mantissa bits + 1).
        DType::F16 => (-2048, 2048),
        DType::BF16 => (-256, 256),
        DType::F32 => (-(1 << 24), 1 << 24),
        DType::F64 => (-(1 << 53), 1 << 53),
    }
}

fn put(out: &mut Vec<u8>, dtype: DType, v: f64) {
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_bits().to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(v).to_bits().to_le_bytes()),
        _ => put_int(out, dtype, v as i128),
    }
}

fn put_int(out: &mut Vec<u8>, dtype: DType, v: i128) {
    match dtype {
        DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        DType::U64 => out.extend_from_slice(&(v as u64).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
        DType::I16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        DType::U16 => out.extend_from_slice(&(v as u16).to_le_bytes()),
        DType::I8 | DType::U8 | DType::Bool => out.push(v as u8),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => put(out, dtype, v as f64),
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Xoshiro256([u64; 4]);

impl Xoshiro256 {
    fn seeded(seed: u64) -> Xoshiro256 {
        let mut s = seed;
        Xoshiro256([
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
        ])
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in (0, 1]: never 0, so the logarithm below is finite.
    fn unit_open_closed(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn normal_pair(&mut self) -> (f64, f64) {
        let u1 = self.unit_open_closed();
        let u2 = self.unit_open_closed();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        (r * theta.cos(), r * theta.sin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xoshiro_matches_the_reference_sequence() {
        // First outputs of xoshiro256** for state [1, 2, 3, 4] (reference implementation by Blackman & Vigna).
        let mut r = Xoshiro256([1, 2, 3, 4]);
        assert_eq!(
            [r.next_u64(), r.next_u64(), r.next_u64()],
            [11520, 0, 1509978240]
        );
    }

    #[test]
    fn same_seed_same_bits_and_sane_moments() {
        let a = generate(
            "x",
            DType::F32,
            &[4096],
            Distribution::Normal { std: 2.0 },
            7,
        )
        .unwrap();
        let b = generate(
            "x",
            DType::F32,
            &[4096],
            Distribution::Normal { std: 2.0 },
            7,
        )
        .unwrap();
        let c = generate(
            "x",
            DType::F32,
            &[4096],
            Distribution::Normal { std: 2.0 },
            8,
        )
        .unwrap();
        assert_eq!(a.data, b.data);
        assert_ne!(a.data, c.data);
        let v = a.to_f64_vec();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.1, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.1, "{var}");
    }

    #[test]
    fn generates_missing_inputs_and_keeps_given_ones() {
        let specs = vec![
            InputSpec {
                name: "x".into(),
                dtype: DType::F32,
                shape: vec![None, Some(3)],
                dim_names: vec!["batch".into(), String::new()],
            },
            InputSpec {
                name: "ids".into(),
                dtype: DType::I64,
                shape: vec![None],
                dim_names: vec!["batch".into()],
            },
        ];
        let dims = BTreeMap::from([("batch".to_string(), 4)]);
        let ids = HostTensor::from_values("ids", vec![4], &[5i64, 6, 7, 8]).unwrap();
        let got = generate_inputs(&specs, &dims, 1, std::slice::from_ref(&ids)).unwrap();
        assert_eq!(got[0].shape, vec![4, 3]);
        assert_eq!(got[1], ids);
        assert_eq!(got, generate_inputs(&specs, &dims, 1, &[ids]).unwrap());
        let err = generate_inputs(&specs, &BTreeMap::new(), 1, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`x`") && err.contains("--dim batch=N"),
            "{err}"
        );
        let stray = HostTensor::from_values("y", vec![1], &[1.0f32]).unwrap();
        let err = generate_inputs(&specs, &dims, 1, &[stray])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`y`") && err.contains("inputs: x, ids"),
            "{err}"
        );
    }

    #[test]
    fn int_range_is_half_open_and_checked() {
        let t = generate(
            "ids",
            DType::I64,
            &[1000],
            Distribution::IntRange { lo: -3, hi: 3 },
            1,
        )
        .unwrap();
        let v = t.to_f64_vec();
        assert!(v.iter().all(|&x| (-3.0..3.0).contains(&x)));
        assert!(v.contains(&-3.0) && v.contains(&2.0));
        assert!(generate(
            "b",
            DType::Bool,
            &[2],
            Distribution::IntRange { lo: 0, hi: 3 },
            1
        )
        .is_err());
        assert!(generate("i", DType::I32, &[2], Distribution::Normal { std: 1.0 }, 1).is_err());
        let ones = generate("m", DType::BF16, &[3], Distribution::Ones, 0).unwrap();
        assert_eq!(ones.to_f64_vec(), vec![1.0; 3]);
    }
}

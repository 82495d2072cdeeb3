//! Host tensors: a name, an element type, a shape and the raw little-endian bytes in C order. They are the only
//! tensor type that crosses this crate's API; conversion to and from ONNX Runtime values lives here.
//!
//! Invariant: `data.len() == shape.iter().product() * dtype.size()` (checked by every constructor).

use std::fmt;
use std::str::FromStr;

use ort::memory::{AllocationDevice, Allocator};
use ort::value::{DynTensor, DynValue, TensorElementType};

use crate::error::{Result, RuntimeError};

/// Element types this crate moves between host and ONNX Runtime. `F16` and `BF16` are stored as their bits.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }

    pub(crate) fn to_ort(self) -> TensorElementType {
        match self {
            DType::F32 => TensorElementType::Float32,
            DType::F64 => TensorElementType::Float64,
            DType::F16 => TensorElementType::Float16,
            DType::BF16 => TensorElementType::Bfloat16,
            DType::I64 => TensorElementType::Int64,
            DType::I32 => TensorElementType::Int32,
            DType::I16 => TensorElementType::Int16,
            DType::I8 => TensorElementType::Int8,
            DType::U8 => TensorElementType::Uint8,
            DType::U16 => TensorElementType::Uint16,
            DType::U32 => TensorElementType::Uint32,
            DType::U64 => TensorElementType::Uint64,
            DType::Bool => TensorElementType::Bool,
        }
    }

    pub(crate) fn from_ort(t: TensorElementType) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.to_ort() == t)
    }

    /// Element `i` of little-endian `data` as f64 (exact for every type except i64/u64 beyond 2^53).
    pub(crate) fn read_f64(self, data: &[u8], i: usize) -> f64 {
        let s = self.size();
        let b = &data[i * s..(i + 1) * s];
        match self {
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
            DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
            DType::I64 => {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64
            }
            DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            DType::I8 => b[0] as i8 as f64,
            DType::U8 | DType::Bool => b[0] as f64,
            DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
            DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::U64 => {
                u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<DType, String> {
        let alias = match s {
            "float" | "float32" => "f32",
            "double" | "float64" => "f64",
            "float16" | "half" => "f16",
            "bfloat16" => "bf16",
            "int64" => "i64",
            "int32" => "i32",
            "int16" => "i16",
            "int8" => "i8",
            "uint8" => "u8",
            "uint16" => "u16",
            "uint32" => "u32",
            "uint64" => "u64",
            other => other,
        };
        DType::ALL
            .into_iter()
            .find(|d| d.name() == alias)
            .ok_or_else(|| format!("unknown dtype `{s}` (expected one of f32 f64 f16 bf16 i64 i32 i16 i8 u8 u16 u32 u64 bool)"))
    }
}

/// A tensor in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Little-endian element bytes in C order.
    pub data: Vec<u8>,
}

/// Element types that can build a [`HostTensor`] from a typed slice.
pub trait Element: Copy {
    const DTYPE: DType;
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i64, DType::I64);
element!(i32, DType::I32);
element!(i16, DType::I16);
element!(i8, DType::I8);
element!(u8, DType::U8);
element!(u16, DType::U16);
element!(u32, DType::U32);
element!(u64, DType::U64);
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn put_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
}
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
}
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
}

impl HostTensor {
    /// A tensor from raw little-endian bytes; checks the byte count against the shape.
    pub fn from_bytes(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<usize>,
        data: Vec<u8>,
    ) -> Result<HostTensor> {
        let name = name.into();
        let expected = byte_len(&name, dtype, &shape)?;
        if data.len() != expected {
            return Err(RuntimeError::Tensor {
                tensor: name,
                message: format!(
                    "{} bytes of data for {dtype} shape {shape:?}, which needs {expected}",
                    data.len()
                ),
            });
        }
        Ok(HostTensor {
            name,
            dtype,
            shape,
            data,
        })
    }

    /// A tensor from typed values.
    pub fn from_values<T: Element>(
        name: impl Into<String>,
        shape: Vec<usize>,
        values: &[T],
    ) -> Result<HostTensor> {
        let mut data = Vec::with_capacity(values.len() * T::DTYPE.size());
        for &v in values {
            v.put_le(&mut data);
        }
        HostTensor::from_bytes(name, T::DTYPE, shape, data)
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn byte_size(&self) -> usize {
        self.data.len()
    }

    /// Element `i` as f64.
    pub fn get_f64(&self, i: usize) -> f64 {
        self.dtype.read_f64(&self.data, i)
    }

    /// All elements as f64 (see [`DType`] for the precision caveat on 64-bit integers).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get_f64(i)).collect()
    }

    /// The f32 elements; an error naming the tensor for any other dtype.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        if self.dtype != DType::F32 {
            return Err(RuntimeError::Tensor {
                tensor: self.name.clone(),
                message: format!("is {}, not f32", self.dtype),
            });
        }
        Ok(self
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Copies into an ONNX Runtime tensor on the CPU (allocated outside any session arena).
    pub(crate) fn to_ort(&self) -> Result<DynTensor> {
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        let mut tensor = DynTensor::new(&Allocator::default(), self.dtype.to_ort(), shape)
            .map_err(|e| RuntimeError::Tensor {
                tensor: self.name.clone(),
                message: format!("allocating: {e}"),
            })?;
        if !self.data.is_empty() {
            let dst = tensor.data_ptr_mut().cast::<u8>();
            // SAFETY: `tensor` is a CPU tensor of exactly `self.data.len()` bytes (same dtype and shape, checked by the
            // constructors), freshly allocated and not aliased.
            unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr(), dst, self.data.len()) };
        }
        Ok(tensor)
    }

    /// Copies an ONNX Runtime output value to the host (from any device).
    pub(crate) fn from_ort(name: &str, value: DynValue) -> Result<HostTensor> {
        let tensor: DynTensor = value.downcast().map_err(|e| RuntimeError::Tensor {
            tensor: name.to_string(),
            message: format!("not a tensor: {e}"),
        })?;
        let ort_type = *tensor.data_type();
        let dtype = DType::from_ort(ort_type).ok_or_else(|| RuntimeError::Tensor {
            tensor: name.to_string(),
            message: format!("element type {ort_type:?} is not supported"),
        })?;
        let shape: Vec<usize> = tensor.shape().iter().map(|&d| d.max(0) as usize).collect();
        let bytes = byte_len(name, dtype, &shape)?;
        let host_copy;
        let cpu = if tensor.memory_info().is_cpu_accessible() {
            &tensor
        } else {
            host_copy = tensor
                .to(AllocationDevice::CPU, 0)
                .map_err(|e| RuntimeError::Tensor {
                    tensor: name.to_string(),
                    message: format!("copying to the host: {e}"),
                })?;
            &host_copy
        };
        let mut data = vec![0u8; bytes];
        if bytes > 0 {
            let src = cpu.data_ptr().cast::<u8>();
            // SAFETY: a CPU-accessible tensor of `dtype` and `shape` holds exactly `bytes` bytes at `data_ptr`.
            unsafe { std::ptr::copy_nonoverlapping(src, data.as_mut_ptr(), bytes) };
        }
        Ok(HostTensor {
            name: name.to_string(),
            dtype,
            shape,
            data,
        })
    }
}

fn byte_len(name: &str, dtype: DType, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| RuntimeError::Tensor {
            tensor: name.to_string(),
            message: format!("shape {shape:?} overflows"),
        })
}

//! Shapes with symbolic dims.
//!
//! A [`Dim`] is a known size, a named symbol (`seq`), or a polynomial in symbols with
//! integer coefficients (`2*batch*seq + 4`) that shape inference builds; products and sums
//! are kept exactly. [`Bindings`] (`seq=4096`) make dims concrete; every byte size uses
//! checked arithmetic.

use std::collections::BTreeMap;
use std::fmt;

/// Values for symbolic dims, e.g. from `--dim seq=4096`.
pub type Bindings = BTreeMap<String, u64>;

/// Why a shape could not be made concrete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("symbolic dim `{0}` has no value: bind it with --dim {0}=N")]
    Unbound(String),
    #[error("dim expression `{0}` is negative under the given bindings")]
    Negative(String),
    #[error("size overflows 64 bits: {0}")]
    Overflow(String),
}

/// A polynomial in named symbols: Σ coeff · Π symbols. Monomials are sorted symbol lists
/// (a symbol repeated for a power); the empty monomial is the constant term. Zero
/// coefficients are never stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Poly {
    terms: BTreeMap<Vec<String>, i128>,
}

impl Poly {
    fn constant(c: i128) -> Poly {
        let mut p = Poly::default();
        if c != 0 {
            p.terms.insert(Vec::new(), c);
        }
        p
    }

    fn symbol(name: &str) -> Poly {
        let mut p = Poly::default();
        p.terms.insert(vec![name.to_string()], 1);
        p
    }

    fn add(&self, other: &Poly, sign: i128) -> Poly {
        let mut out = self.clone();
        for (m, c) in &other.terms {
            let e = out.terms.entry(m.clone()).or_insert(0);
            *e += sign * c;
            if *e == 0 {
                out.terms.remove(m);
            }
        }
        out
    }

    fn mul(&self, other: &Poly) -> Poly {
        let mut out = Poly::default();
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                let mut m: Vec<String> = ma.iter().chain(mb.iter()).cloned().collect();
                m.sort();
                let e = out.terms.entry(m.clone()).or_insert(0);
                *e += ca * cb;
                if *e == 0 {
                    out.terms.remove(&m);
                }
            }
        }
        out
    }

    /// Exact division by a single term (coefficient and symbols), if every term divides.
    fn div_term(&self, mono: &[String], coeff: i128) -> Option<Poly> {
        if coeff == 0 {
            return None;
        }
        let mut out = Poly::default();
        for (m, c) in &self.terms {
            if c % coeff != 0 {
                return None;
            }
            let mut rest = m.clone();
            for s in mono {
                let pos = rest.iter().position(|x| x == s)?;
                rest.remove(pos);
            }
            out.terms.insert(rest, c / coeff);
        }
        Some(out)
    }

    fn eval(&self, b: &Bindings) -> Result<i128, ShapeError> {
        let mut total: i128 = 0;
        for (m, c) in &self.terms {
            let mut v: i128 = *c;
            for s in m {
                let x = *b.get(s).ok_or_else(|| ShapeError::Unbound(s.clone()))?;
                v = v
                    .checked_mul(x as i128)
                    .ok_or_else(|| ShapeError::Overflow(self.to_string()))?;
            }
            total = total
                .checked_add(v)
                .ok_or_else(|| ShapeError::Overflow(self.to_string()))?;
        }
        Ok(total)
    }
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        // Highest-degree terms first, constant last.
        let mut terms: Vec<_> = self.terms.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (m, c)) in terms.into_iter().enumerate() {
            let (neg, mag) = (*c < 0, c.unsigned_abs());
            match (i, neg) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            if m.is_empty() {
                write!(f, "{mag}")?;
            } else {
                if mag != 1 {
                    write!(f, "{mag}*")?;
                }
                f.write_str(&m.join("*"))?;
            }
        }
        Ok(())
    }
}

/// One dimension of a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Known(u64),
    Sym(String),
    /// A polynomial that is neither a constant nor a lone symbol.
    Expr(Poly),
}

impl Dim {
    /// A named symbol.
    pub fn sym(name: impl Into<String>) -> Dim {
        Dim::Sym(name.into())
    }

    fn to_poly(&self) -> Poly {
        match self {
            Dim::Known(k) => Poly::constant(*k as i128),
            Dim::Sym(s) => Poly::symbol(s),
            Dim::Expr(p) => p.clone(),
        }
    }

    fn from_poly(p: Poly) -> Dim {
        if p.terms.is_empty() {
            return Dim::Known(0);
        }
        if p.terms.len() == 1 {
            let (m, c) = p
                .terms
                .iter()
                .next()
                .map(|(m, c)| (m.clone(), *c))
                .unwrap_or_default();
            if m.is_empty() && c >= 0 && c <= u64::MAX as i128 {
                return Dim::Known(c as u64);
            }
            if m.len() == 1 && c == 1 {
                return Dim::Sym(m[0].clone());
            }
        }
        Dim::Expr(p)
    }

    /// The value if it does not depend on any symbol.
    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(k) => Some(*k),
            _ => None,
        }
    }

    /// `self + other`, kept symbolic.
    pub fn add(&self, other: &Dim) -> Dim {
        Dim::from_poly(self.to_poly().add(&other.to_poly(), 1))
    }

    /// `self - other`, kept symbolic (may be negative until bound).
    pub fn sub(&self, other: &Dim) -> Dim {
        Dim::from_poly(self.to_poly().add(&other.to_poly(), -1))
    }

    /// `self * other`, kept symbolic.
    pub fn mul(&self, other: &Dim) -> Dim {
        Dim::from_poly(self.to_poly().mul(&other.to_poly()))
    }

    /// `self / other` when it divides exactly as polynomials (other must be one term),
    /// e.g. `(2*b*s) / s = 2*b`; `None` otherwise.
    pub fn div_exact(&self, other: &Dim) -> Option<Dim> {
        let d = other.to_poly();
        if d == self.to_poly() && !d.terms.is_empty() {
            return Some(Dim::Known(1));
        }
        if d.terms.len() != 1 {
            return None;
        }
        let (m, c) = d.terms.iter().next()?;
        self.to_poly().div_term(m, *c).map(Dim::from_poly)
    }

    /// The product of many dims (1 for none).
    pub fn product<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Dim {
        dims.into_iter().fold(Dim::Known(1), |acc, d| acc.mul(d))
    }

    /// The concrete value under `b`.
    pub fn eval(&self, b: &Bindings) -> Result<u64, ShapeError> {
        match self {
            Dim::Known(k) => Ok(*k),
            Dim::Sym(s) => b
                .get(s)
                .copied()
                .ok_or_else(|| ShapeError::Unbound(s.clone())),
            Dim::Expr(p) => {
                let v = p.eval(b)?;
                if v < 0 {
                    Err(ShapeError::Negative(p.to_string()))
                } else {
                    u64::try_from(v).map_err(|_| ShapeError::Overflow(p.to_string()))
                }
            }
        }
    }

    /// The symbols this dim mentions.
    pub fn symbols(&self) -> Vec<String> {
        match self {
            Dim::Known(_) => vec![],
            Dim::Sym(s) => vec![s.clone()],
            Dim::Expr(p) => {
                let mut v: Vec<String> = p.terms.keys().flatten().cloned().collect();
                v.sort();
                v.dedup();
                v
            }
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(k) => write!(f, "{k}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Expr(p) => write!(f, "({p})"),
        }
    }
}

/// A tensor shape: one [`Dim`] per axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// A shape of known dims.
    pub fn known(dims: &[u64]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The element count, symbolic.
    pub fn numel(&self) -> Dim {
        Dim::product(&self.0)
    }

    /// The concrete dims under `b`.
    pub fn eval(&self, b: &Bindings) -> Result<Vec<u64>, ShapeError> {
        self.0.iter().map(|d| d.eval(b)).collect()
    }

    /// Element count under `b`, with overflow checked.
    pub fn numel_under(&self, b: &Bindings) -> Result<u64, ShapeError> {
        let mut n: u64 = 1;
        for d in &self.0 {
            let v = d.eval(b)?;
            n = n
                .checked_mul(v)
                .ok_or_else(|| ShapeError::Overflow(self.to_string()))?;
        }
        Ok(n)
    }

    /// Bytes for `bits` per element under `b` (sub-byte types round up), overflow checked.
    pub fn bytes_under(&self, bits: u64, b: &Bindings) -> Result<u64, ShapeError> {
        let n = self.numel_under(b)?;
        let total_bits = n
            .checked_mul(bits)
            .ok_or_else(|| ShapeError::Overflow(self.to_string()))?;
        Ok(total_bits.div_ceil(8))
    }

    /// Symbols mentioned anywhere in the shape, sorted and unique.
    pub fn symbols(&self) -> Vec<String> {
        let mut v: Vec<String> = self.0.iter().flat_map(|d| d.symbols()).collect();
        v.sort();
        v.dedup();
        v
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Dim {
        Dim::sym(x)
    }

    #[test]
    fn arithmetic_stays_symbolic_and_normalises() {
        let bs = s("batch").mul(&s("seq"));
        assert_eq!(bs.to_string(), "(batch*seq)");
        let two_bs = bs.mul(&Dim::Known(2));
        assert_eq!(two_bs.to_string(), "(2*batch*seq)");
        assert_eq!(
            two_bs.div_exact(&s("seq")),
            Some(s("batch").mul(&Dim::Known(2)))
        );
        assert_eq!(two_bs.div_exact(&Dim::Known(2)), Some(bs.clone()));
        assert_eq!(bs.div_exact(&Dim::Known(2)), None);
        assert_eq!(bs.div_exact(&bs), Some(Dim::Known(1)));
        assert_eq!(s("seq").add(&Dim::Known(0)), s("seq"));
        assert_eq!(s("seq").sub(&s("seq")), Dim::Known(0));
        assert_eq!(Dim::Known(3).mul(&Dim::Known(4)), Dim::Known(12));
        let e = s("seq").add(&Dim::Known(4));
        assert_eq!(e.to_string(), "(seq + 4)");
    }

    #[test]
    fn eval_binds_and_checks() {
        let b: Bindings = [("batch".to_string(), 8), ("seq".to_string(), 4096)].into();
        let sh = Shape(vec![s("batch"), s("seq"), Dim::Known(768)]);
        assert_eq!(sh.numel_under(&b), Ok(8 * 4096 * 768));
        assert_eq!(sh.bytes_under(32, &b), Ok(8 * 4096 * 768 * 4));
        assert_eq!(Shape::known(&[3]).bytes_under(4, &b), Ok(2));
        assert_eq!(
            Shape(vec![s("nope")]).numel_under(&b),
            Err(ShapeError::Unbound("nope".into()))
        );
        let huge = Shape::known(&[u64::MAX, 2]);
        assert!(matches!(huge.numel_under(&b), Err(ShapeError::Overflow(_))));
        assert!(matches!(
            Shape::known(&[u64::MAX / 4]).bytes_under(32, &b),
            Err(ShapeError::Overflow(_))
        ));
        assert!(matches!(
            Dim::Known(1).sub(&s("seq")).eval(&b),
            Err(ShapeError::Negative(_))
        ));
    }
}

//! TensorFlow.js `model.json`: the weights manifest and how tfjs-core decodes each weight
//! (`tfjs-core/src/io/io_utils.ts`, `decodeWeights`).
//!
//! A `model.json` is a JSON object: `format` (`layers-model`, `graph-model`), `modelTopology`
//! (a Keras configuration, or a GraphDef in protobuf's JSON form), `signature` (graph models)
//! and `weightsManifest`: groups `{paths: [shard files], weights: [{name, shape, dtype,
//! quantization?}]}`. A group's shards are one byte stream cut in pieces; its weights lie in
//! it in order, each right after the one before. Weights stored quantized
//! (`quantization: {dtype: uint8|uint16|float16, scale, min}`) are served as the runtime
//! holds them: see [`dequantize`].

use serde_json::{Map, Value};

use crate::parse::dtype::DType;

/// A `model.json` larger than this is refused (it is parsed whole, in memory). Converted models
/// hold their weights in shard files; their `model.json` is a few kilobytes to a few megabytes.
pub(crate) const MAX_MODEL_JSON: u64 = 32 << 20;

/// Most elements of a weight (its shape's product): a bound on what a claimed shape may make
/// the reader compute, well above any real model's.
pub(crate) const MAX_ELEMENTS: u64 = 1 << 40;

/// A weight's dtype as TF.js names it (`DataType` in tfjs-core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WDtype {
    Float32,
    Int32,
    Bool,
    String,
    Complex64,
}

impl WDtype {
    fn from_name(s: &str) -> Option<WDtype> {
        Some(match s {
            "float32" => WDtype::Float32,
            "int32" => WDtype::Int32,
            "bool" => WDtype::Bool,
            "string" => WDtype::String,
            "complex64" => WDtype::Complex64,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            WDtype::Float32 => "float32",
            WDtype::Int32 => "int32",
            WDtype::Bool => "bool",
            WDtype::String => "string",
            WDtype::Complex64 => "complex64",
        }
    }

    /// TensorFlow's dtype of the same name.
    pub(crate) fn dtype(self) -> DType {
        // Every name here is in the dtype table; DT_INVALID would be a table defect.
        DType::from_name(self.name()).unwrap_or(DType(0))
    }

    /// Bytes per stored element (`DTYPE_VALUE_SIZE_MAP`); `None` for strings.
    pub(crate) fn size(self) -> Option<u64> {
        match self {
            WDtype::Float32 | WDtype::Int32 => Some(4),
            WDtype::Bool => Some(1),
            WDtype::Complex64 => Some(8),
            WDtype::String => None,
        }
    }
}

/// The stored form of a quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QDtype {
    U8,
    U16,
    F16,
}

impl QDtype {
    pub(crate) fn name(self) -> &'static str {
        match self {
            QDtype::U8 => "uint8",
            QDtype::U16 => "uint16",
            QDtype::F16 => "float16",
        }
    }

    pub(crate) fn size(self) -> u64 {
        match self {
            QDtype::U8 => 1,
            QDtype::U16 | QDtype::F16 => 2,
        }
    }
}

/// A weight's `quantization`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quant {
    pub(crate) stored: QDtype,
    pub(crate) scale: Option<f64>,
    pub(crate) min: Option<f64>,
    /// `original_dtype`, as the converter writes it (informational: the weight's `dtype` is
    /// what the runtime decodes to).
    pub(crate) original_dtype: Option<String>,
}

/// One entry of a group's `weights`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Weight {
    pub(crate) name: String,
    pub(crate) shape: Vec<u64>,
    pub(crate) dtype: WDtype,
    pub(crate) quant: Option<Quant>,
}

impl Weight {
    /// Elements (the shape's product; bounded when parsed).
    pub(crate) fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes it takes in its group's stream; `None` for a string weight (its elements' lengths
    /// are in the stream).
    pub(crate) fn stored_len(&self) -> Option<u64> {
        let size = match &self.quant {
            Some(q) => q.stored.size(),
            None => self.dtype.size()?,
        };
        Some(self.elements() * size)
    }

    /// Why tfjs-core refuses to decode it, if it does (`decodeWeight`'s errors).
    pub(crate) fn undecodable(&self) -> Option<String> {
        let q = self.quant.as_ref()?;
        match (q.stored, self.dtype) {
            (QDtype::U8 | QDtype::U16, WDtype::Float32 | WDtype::Int32) => {
                if q.scale.is_none() || q.min.is_none() {
                    return Some(format!(
                        "quantized to {} without both `scale` and `min`",
                        q.stored.name()
                    ));
                }
                None
            }
            (QDtype::F16, WDtype::Float32) => None,
            (s, d) => Some(format!(
                "{} weights cannot be stored quantized to {} (tfjs-core refuses them)",
                d.name(),
                s.name()
            )),
        }
    }
}

/// A group of the manifest: its shard files (relative to `model.json`) and weights.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub(crate) paths: Vec<String>,
    pub(crate) weights: Vec<Weight>,
}

/// What `model.json` says.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// `format`, when present.
    pub(crate) format: Option<String>,
    pub(crate) groups: Vec<Group>,
    /// `modelTopology`, when present.
    pub(crate) topology: Option<Value>,
    /// `signature` (graph models), when present.
    pub(crate) signature: Option<Value>,
}

impl Model {
    /// A graph model: `format: graph-model`, or (older converters wrote no `format`) a
    /// topology holding `node`.
    pub(crate) fn is_graph(&self) -> bool {
        match self.format.as_deref() {
            Some(f) => f == "graph-model",
            None => self
                .topology
                .as_ref()
                .is_some_and(|t| t.get("node").is_some()),
        }
    }
}

/// Whether a parsed JSON value is a TF.js model: an object with `weightsManifest` and
/// `modelTopology` or `format`.
pub(crate) fn is_model(v: &Value) -> bool {
    v.get("weightsManifest").is_some()
        && (v.get("modelTopology").is_some() || v.get("format").is_some())
}

/// Whether `bytes` may be a JSON object (its first non-blank byte is `{`): a cheap test before
/// parsing.
pub(crate) fn looks_like_object(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Parses `model.json`. Errors say what is wrong, by its place in the file
/// (`weightsManifest[0].weights[3].shape`).
pub(crate) fn parse(bytes: &[u8]) -> Result<Model, String> {
    if bytes.len() as u64 > MAX_MODEL_JSON {
        return Err(format!(
            "{} bytes: model.json files over {MAX_MODEL_JSON} bytes are refused (they are parsed in memory)",
            bytes.len()
        ));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    from_value(v)
}

/// The name a bare weights manifest's file ends with (`weights_manifest.json` as the converter's
/// `write_weights` names it, `<model>-weights_manifest.json` in face-api.js's `weights/`).
pub(crate) const MANIFEST_SUFFIX: &str = "weights_manifest.json";

/// Whether `name` is a bare weights manifest's file name.
pub(crate) fn is_manifest_name(name: &str) -> bool {
    name.ends_with(MANIFEST_SUFFIX)
}

/// Parses a bare weights manifest (a `*weights_manifest.json`: the list of groups a
/// `model.json`'s `weightsManifest` holds, without the model) as a model with no topology.
pub(crate) fn parse_manifest(bytes: &[u8]) -> Result<Model, String> {
    if bytes.len() as u64 > MAX_MODEL_JSON {
        return Err(format!(
            "{} bytes: weights manifests over {MAX_MODEL_JSON} bytes are refused (they are parsed in memory)",
            bytes.len()
        ));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    if !v.is_array() {
        return Err(
            "not a weights manifest: a JSON list of groups (`paths`, `weights`) was expected"
                .into(),
        );
    }
    let mut top = Map::new();
    top.insert("weightsManifest".into(), v);
    top.insert("format".into(), Value::String("weights-manifest".into()));
    from_value(Value::Object(top))
}

/// [`parse`] of a JSON value already parsed.
pub(crate) fn from_value(v: Value) -> Result<Model, String> {
    let Value::Object(mut top) = v else {
        return Err("not a JSON object".into());
    };
    if !is_model(&Value::Object(top.clone())) {
        return Err(
            "not a TensorFlow.js model: a JSON object with `weightsManifest` and `modelTopology` or `format` was expected"
                .into(),
        );
    }
    let format = match top.remove("format") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err("`format` is not a string".into()),
    };
    let groups = match top.remove("weightsManifest") {
        Some(Value::Array(gs)) => gs
            .into_iter()
            .enumerate()
            .map(|(i, g)| group(g).map_err(|e| format!("weightsManifest[{i}]{e}")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err("`weightsManifest` is not a list".into()),
    };
    Ok(Model {
        format,
        groups,
        topology: top.remove("modelTopology").filter(|t| !t.is_null()),
        signature: top.remove("signature").filter(|t| !t.is_null()),
    })
}

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!(": no `{k}`"))
}

fn group(g: Value) -> Result<Group, String> {
    let Value::Object(o) = g else {
        return Err(": not an object".into());
    };
    let paths = match field(&o, "paths")? {
        Value::Array(ps) => ps
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!(".paths[{i}]: not a string"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(".paths: not a list".into()),
    };
    let weights = match field(&o, "weights")? {
        Value::Array(ws) => ws
            .iter()
            .enumerate()
            .map(|(i, w)| weight(w).map_err(|e| format!(".weights[{i}]{e}")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(".weights: not a list".into()),
    };
    Ok(Group { paths, weights })
}

fn weight(w: &Value) -> Result<Weight, String> {
    let Value::Object(o) = w else {
        return Err(": not an object".into());
    };
    let name = field(o, "name")?
        .as_str()
        .ok_or(".name: not a string")?
        .to_string();
    let dtype_name = field(o, "dtype")?.as_str().ok_or(".dtype: not a string")?;
    let dtype = WDtype::from_name(dtype_name).ok_or_else(|| {
        format!(" ({name}): dtype {dtype_name:?} is not one of TF.js's (float32, int32, bool, string, complex64)")
    })?;
    let shape = match field(o, "shape")? {
        Value::Array(dims) => dims
            .iter()
            .map(Value::as_u64)
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| format!(" ({name}): shape is not a list of sizes"))?,
        _ => return Err(format!(" ({name}): shape is not a list")),
    };
    let mut n = 1u64;
    for d in &shape {
        n = n
            .checked_mul(*d)
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| {
                format!(" ({name}): shape {shape:?} has more than {MAX_ELEMENTS} elements")
            })?;
    }
    let quant = match o.get("quantization") {
        None | Some(Value::Null) => None,
        Some(Value::Object(q)) => {
            let stored = match q.get("dtype").and_then(Value::as_str) {
                Some("uint8") => QDtype::U8,
                Some("uint16") => QDtype::U16,
                Some("float16") => QDtype::F16,
                other => {
                    return Err(format!(
                        " ({name}): quantization dtype {other:?} is not uint8, uint16 or float16"
                    ))
                }
            };
            let num = |k: &str| -> Result<Option<f64>, String> {
                match q.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => v
                        .as_f64()
                        .map(Some)
                        .ok_or_else(|| format!(" ({name}): quantization {k} is not a number")),
                }
            };
            Some(Quant {
                stored,
                scale: num("scale")?,
                min: num("min")?,
                original_dtype: q
                    .get("original_dtype")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
        }
        Some(_) => return Err(format!(" ({name}): quantization is not an object")),
    };
    Ok(Weight {
        name,
        shape,
        dtype,
        quant,
    })
}

/// A shard path of the manifest, if it is one tfmount follows: relative, below `model.json`'s
/// directory (no `..`, no absolute path, no URL), and not empty.
pub(crate) fn safe_shard_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && !p.contains("://")
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

// ---------------------------------------------------------------------------------------------
// Decoding, as tfjs-core's `decodeWeight` does it
// ---------------------------------------------------------------------------------------------

/// One uint8/uint16 value of a float32 weight: `v * scale + min` in JavaScript numbers
/// (IEEE doubles, two roundings: no fused multiply-add), stored into a `Float32Array` (rounded
/// to the nearest float32, ties to even).
pub(crate) fn dequantize(v: u16, scale: f64, min: f64) -> f32 {
    (f64::from(v) * scale + min) as f32
}

/// One uint8/uint16 value of an int32 weight: `Math.round(v * scale + min)` stored into an
/// `Int32Array`: rounded half up (toward +infinity), then ECMAScript's ToInt32 (NaN and
/// infinities to 0, other values modulo 2^32).
pub(crate) fn dequantize_i32(v: u16, scale: f64, min: f64) -> i32 {
    let x = f64::from(v) * scale + min;
    if !x.is_finite() {
        return 0;
    }
    let f = x.floor();
    let r = if x - f >= 0.5 { f + 1.0 } else { f };
    // ToInt32: modulo 2^32, exact in doubles for integers of any magnitude (rem_euclid of an
    // integral double by 2^32 is an integer in [0, 2^32)).
    r.rem_euclid(4_294_967_296.0) as u32 as i32
}

/// float16 bits widened as tfjs-core's `getFloat16Decoder` does it (three lookup tables after
/// "Fast Half Float Conversions"): the exact value for every finite half, and infinities and
/// NaNs with their payload moved up (no quiet bit set). Returns the float32's bits.
pub(crate) fn f16_widen(h: u16) -> u32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise the mantissa (what the mantissa table holds).
            let mut m = m << 13;
            let mut e: u32 = 0x3880_0000;
            while m & 0x0080_0000 == 0 {
                e -= 0x0080_0000;
                m <<= 1;
            }
            sign | ((m & !0x0080_0000) | e)
        }
        (31, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    }
}

/// `stored` bytes of whole elements of a quantized weight (`stored.len()` a multiple of the
/// stored size) decoded into the served little-endian bytes (4 per element).
pub(crate) fn decode_quantized(
    stored: &[u8],
    q: &Quant,
    dtype: WDtype,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let values = |f: &mut dyn FnMut(u16)| match q.stored {
        QDtype::U8 => stored.iter().for_each(|&b| f(u16::from(b))),
        QDtype::U16 | QDtype::F16 => stored
            .chunks_exact(2)
            .for_each(|c| f(u16::from_le_bytes([c[0], c[1]]))),
    };
    match (q.stored, dtype, q.scale, q.min) {
        (QDtype::F16, WDtype::Float32, _, _) => {
            values(&mut |h| out.extend_from_slice(&f16_widen(h).to_le_bytes()))
        }
        (QDtype::U8 | QDtype::U16, WDtype::Float32, Some(s), Some(m)) => {
            values(&mut |v| out.extend_from_slice(&dequantize(v, s, m).to_le_bytes()))
        }
        (QDtype::U8 | QDtype::U16, WDtype::Int32, Some(s), Some(m)) => {
            values(&mut |v| out.extend_from_slice(&dequantize_i32(v, s, m).to_le_bytes()))
        }
        _ => {
            return Err(format!(
                "{} weight quantized to {} cannot be decoded",
                dtype.name(),
                q.stored.name()
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_rounding_of_int32_weights() {
        // Math.round rounds halves up (toward +infinity), unlike numpy's round (to even).
        assert_eq!(dequantize_i32(5, 0.5, 0.0), 3);
        assert_eq!(dequantize_i32(5, 0.5, -5.0), -2);
        assert_eq!(dequantize_i32(1, 0.49999999999999994, 0.0), 0);
        // ToInt32 wraps.
        assert_eq!(dequantize_i32(1, 4_294_967_296.0 + 7.0, 0.0), 7);
        assert_eq!(dequantize_i32(1, f64::NAN, 0.0), 0);
    }

    #[test]
    fn half_widening_is_exact_and_keeps_nan_payloads() {
        // Every finite half: its exact value (checked by the f32 round trip through f64 math).
        for h in 0u16..=u16::MAX {
            let w = f32::from_bits(f16_widen(h));
            let e = (h >> 10) & 0x1f;
            let m = f64::from(h & 0x3ff);
            let s = if h >> 15 == 1 { -1.0 } else { 1.0 };
            let want = match e {
                0 => s * m * 2f64.powi(-24),
                31 => continue,
                e => s * (1024.0 + m) * 2f64.powi(i32::from(e) - 25),
            };
            assert_eq!(f64::from(w), want, "{h:#06x}");
            assert_eq!(w.is_sign_negative(), h >> 15 == 1, "{h:#06x}");
        }
        assert_eq!(f16_widen(0x7c00), 0x7f80_0000);
        assert_eq!(f16_widen(0xfc00), 0xff80_0000);
        assert_eq!(f16_widen(0x7c01), 0x7f80_2000);
    }

    #[test]
    fn manifest_errors_say_where() {
        let e = parse(br#"{"format":"graph-model","weightsManifest":[{"paths":[],"weights":[{"name":"a","dtype":"float32","shape":[-1]}]}]}"#).unwrap_err();
        assert!(e.contains("weightsManifest[0].weights[0]"), "{e}");
        assert!(parse(b"[1]").is_err());
        assert!(parse(br#"{"a":1}"#)
            .unwrap_err()
            .contains("not a TensorFlow.js model"));
        let e = parse(br#"{"format":"x","weightsManifest":[{"paths":[],"weights":[{"name":"a","dtype":"float32","shape":[1099511627776,2]}]}]}"#).unwrap_err();
        assert!(e.contains("elements"), "{e}");
    }

    #[test]
    fn shard_paths_stay_below_model_json() {
        assert!(safe_shard_path("group1-shard1of1.bin"));
        assert!(safe_shard_path("weights/g1.bin"));
        for p in [
            "",
            "/etc/passwd",
            "../x.bin",
            "a/../../b",
            "http://x/y",
            "a//b",
            "./a",
        ] {
            assert!(!safe_shard_path(p), "{p}");
        }
    }
}

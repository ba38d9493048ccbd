//! `StructuredValue` protos (a SavedObjectGraph's function signatures) as the Python values
//! TensorFlow's `nested_structure_coder.decode_proto` makes of them, and the `str()`/`repr()`
//! of those values as `saved_model_cli` prints them.
//!
//! Decoding fails exactly where TensorFlow's decoder raises (no kind set, an invalid dtype, an
//! unknown TypeSpec class, a namedtuple with invalid names): `saved_model_cli` then cannot load
//! the model. Values TensorFlow decodes into objects this crate does not model (tensors, numpy
//! arrays, the bounds of a BoundedTensorSpec) print as a placeholder `<...>`.

use crate::proto::structured_value::Kind;
use crate::proto::{StructuredValue, TensorShapeProto};

use crate::render::pyrepr::{float_repr, str_repr};

/// Deeper structures are refused (prost refuses messages nested over 100 deep anyway).
const MAX_DEPTH: usize = 128;

/// A TensorShape: `None` when the rank is unknown; `None` dims are unknown (-1 in the proto).
pub(crate) type Shape = Option<Vec<Option<i64>>>;

/// A decoded StructuredValue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Py {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    /// A dict, in the order of the proto's map (Python's order is the protobuf runtime's hash
    /// order, which changes from run to run).
    Dict(Vec<(String, Py)>),
    NamedTuple {
        name: String,
        fields: Vec<(String, Py)>,
    },
    Shape(Shape),
    /// A DType, by its Python name (`float32`).
    DType(String),
    TensorSpec {
        shape: Shape,
        dtype: String,
        name: Option<String>,
        /// A BoundedTensorSpec (its minimum and maximum are not rendered).
        bounded: bool,
    },
    /// Any other TypeSpec: its class name and serialized state (`repr` is `Class(state...)`).
    TypeSpec {
        class: String,
        state: Box<Py>,
    },
    /// A value TensorFlow decodes into an object not modelled here (a tensor, a numpy array).
    Opaque {
        type_name: &'static str,
    },
}

/// The Python name of DataType `v` (`tf.float32` without `tf.`), or `None` for values
/// `tf.dtypes.DType` refuses (DT_INVALID, unknown numbers).
pub(crate) fn dtype_py_name(v: i32) -> Option<String> {
    let (base, suffix) = if (101..=200).contains(&v) {
        (v - 100, "_ref")
    } else {
        (v, "")
    };
    if base <= 0 {
        return None;
    }
    let enum_name = crate::descriptors::enum_value_name("tensorflow.DataType", base);
    let name = enum_name.strip_prefix("DT_")?;
    let py = match name {
        "FLOAT" => "float32".to_string(),
        "DOUBLE" => "float64".to_string(),
        "HALF" => "float16".to_string(),
        n => n.to_ascii_lowercase(),
    };
    Some(py + suffix)
}

fn shape_of(s: Option<&TensorShapeProto>) -> Shape {
    // An absent shape is the default TensorShapeProto: known rank 0.
    match s {
        Some(s) if s.unknown_rank => None,
        Some(s) => Some(
            s.dim
                .iter()
                .map(|d| (d.size != -1).then_some(d.size))
                .collect(),
        ),
        None => Some(Vec::new()),
    }
}

/// The class TypeSpecProto.type_spec_class `c` decodes to (`BuiltInTypeSpecCodec`
/// registrations); registered and extension types go by their recorded name.
fn type_spec_class(c: i32, recorded: &str) -> Result<String, String> {
    let name = match c {
        1 => "SparseTensorSpec",
        2 => "IndexedSlicesSpec",
        3 => "RaggedTensorSpec",
        4 => "TensorArraySpec",
        5 => "DatasetSpec",
        6 => "IteratorSpec",
        7 => "OptionalSpec",
        8 => "PerReplicaSpec",
        9 => "VariableSpec",
        10 => "RowPartitionSpec",
        12 | 13 if !recorded.is_empty() => {
            // The registered name ("tf.foo.BarSpec"): the class is its last component.
            return Ok(recorded.rsplit('.').next().unwrap_or(recorded).to_string());
        }
        _ => {
            return Err(format!(
                "TypeSpec class {c} ({recorded:?}) is not supported"
            ))
        }
    };
    Ok(name.to_string())
}

const PY_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// What `collections.namedtuple` accepts as a type or field name.
fn is_identifier(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c == '_' || c.is_alphabetic())
        && cs.all(|c| c == '_' || c.is_alphanumeric())
        && !PY_KEYWORDS.contains(&s)
}

/// Decodes `v` as `nested_structure_coder.decode_proto` does.
pub(crate) fn decode(v: &StructuredValue) -> Result<Py, String> {
    decode_at(v, 0)
}

fn decode_at(v: &StructuredValue, depth: usize) -> Result<Py, String> {
    if depth > MAX_DEPTH {
        return Err("StructuredValue nested too deeply".into());
    }
    let all = |vals: &[StructuredValue]| -> Result<Vec<Py>, String> {
        vals.iter().map(|x| decode_at(x, depth + 1)).collect()
    };
    let dtype = |d: i32| dtype_py_name(d).ok_or_else(|| format!("invalid DataType {d}"));
    Ok(
        match v.kind.as_ref().ok_or("StructuredValue without a value")? {
            Kind::NoneValue(_) => Py::None,
            Kind::Float64Value(x) => Py::Float(*x),
            Kind::Int64Value(x) => Py::Int(*x),
            Kind::StringValue(s) => Py::Str(s.clone()),
            Kind::BoolValue(b) => Py::Bool(*b),
            Kind::TensorShapeValue(s) => Py::Shape(shape_of(Some(s))),
            Kind::TensorDtypeValue(d) => Py::DType(dtype(*d)?),
            Kind::TensorSpecValue(t) => Py::TensorSpec {
                shape: shape_of(t.shape.as_ref()),
                dtype: dtype(t.dtype)?,
                name: (!t.name.is_empty()).then(|| t.name.clone()),
                bounded: false,
            },
            Kind::BoundedTensorSpecValue(t) => Py::TensorSpec {
                shape: shape_of(t.shape.as_ref()),
                dtype: dtype(t.dtype)?,
                name: (!t.name.is_empty()).then(|| t.name.clone()),
                bounded: true,
            },
            Kind::TypeSpecValue(t) => {
                let class = type_spec_class(t.type_spec_class, &t.type_spec_class_name)?;
                let state = match &t.type_state {
                    Some(s) => decode_at(s, depth + 1)?,
                    None => return Err("TypeSpec without a state".into()),
                };
                Py::TypeSpec {
                    class,
                    state: Box::new(state),
                }
            }
            Kind::ListValue(l) => Py::List(all(&l.values)?),
            Kind::TupleValue(t) => Py::Tuple(all(&t.values)?),
            Kind::DictValue(d) => Py::Dict(
                d.fields
                    .iter()
                    .map(|(k, x)| Ok((k.clone(), decode_at(x, depth + 1)?)))
                    .collect::<Result<_, String>>()?,
            ),
            Kind::NamedTupleValue(n) => {
                let mut fields: Vec<(String, Py)> = Vec::with_capacity(n.values.len().min(1024));
                for p in &n.values {
                    let x = match &p.value {
                        Some(x) => decode_at(x, depth + 1)?,
                        None => return Err("namedtuple field without a value".into()),
                    };
                    if !is_identifier(&p.key)
                        || p.key.starts_with('_')
                        || fields.iter().any(|(k, _)| *k == p.key)
                    {
                        return Err(format!("invalid namedtuple field name {:?}", p.key));
                    }
                    fields.push((p.key.clone(), x));
                }
                if !is_identifier(&n.name) {
                    return Err(format!("invalid namedtuple name {:?}", n.name));
                }
                Py::NamedTuple {
                    name: n.name.clone(),
                    fields,
                }
            }
            Kind::TensorValue(_) => Py::Opaque {
                type_name: "EagerTensor",
            },
            Kind::NumpyValue(_) => Py::Opaque {
                type_name: "ndarray",
            },
        },
    )
}

fn dims_list(dims: &[Option<i64>]) -> Vec<String> {
    dims.iter()
        .map(|d| d.map_or("None".to_string(), |v| v.to_string()))
        .collect()
}

/// `str(TensorShape)`: `(None, 3)`, `(3,)`, `()`, `<unknown>`.
fn shape_str(s: &Shape) -> String {
    match s {
        None => "<unknown>".into(),
        Some(d) if d.len() == 1 => format!("({},)", dims_list(d).join("")),
        Some(d) => format!("({})", dims_list(d).join(", ")),
    }
}

fn join_repr(items: &[Py]) -> String {
    items.iter().map(repr).collect::<Vec<_>>().join(", ")
}

fn tuple_repr(items: &[Py]) -> String {
    if items.len() == 1 {
        format!("({},)", join_repr(items))
    } else {
        format!("({})", join_repr(items))
    }
}

/// Python's `repr(value)`.
pub(crate) fn repr(v: &Py) -> String {
    match v {
        Py::Str(s) => str_repr(s),
        Py::Shape(None) => "TensorShape(None)".into(),
        Py::Shape(Some(d)) => format!("TensorShape([{}])", dims_list(d).join(", ")),
        Py::DType(d) => format!("tf.{d}"),
        _ => str_of(v),
    }
}

/// Python's `str(value)`.
pub(crate) fn str_of(v: &Py) -> String {
    match v {
        Py::None => "None".into(),
        Py::Bool(b) => if *b { "True" } else { "False" }.into(),
        Py::Int(i) => i.to_string(),
        Py::Float(x) => float_repr(*x),
        Py::Str(s) => s.clone(),
        Py::List(items) => format!("[{}]", join_repr(items)),
        Py::Tuple(items) => tuple_repr(items),
        Py::Dict(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(k, x)| format!("{}: {}", str_repr(k), repr(x)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Py::NamedTuple { name, fields } => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(k, x)| format!("{k}={}", repr(x)))
                .collect();
            format!("{name}({})", parts.join(", "))
        }
        Py::Shape(s) => shape_str(s),
        Py::DType(d) => format!("<dtype: '{d}'>"),
        Py::TensorSpec {
            shape,
            dtype,
            name,
            bounded,
        } => {
            let name = name.as_deref().map_or("None".to_string(), str_repr);
            if *bounded {
                format!(
                    "BoundedTensorSpec(shape={}, dtype=tf.{dtype}, name={name}, minimum=<...>, maximum=<...>)",
                    shape_str(shape)
                )
            } else {
                format!(
                    "TensorSpec(shape={}, dtype=tf.{dtype}, name={name})",
                    shape_str(shape)
                )
            }
        }
        Py::TypeSpec { class, state } => match (class.as_str(), state.as_ref()) {
            // VariableSpec has its own __repr__ over its state (shape, dtype, trainable, alias_id).
            ("VariableSpec", Py::Tuple(s)) if s.len() == 4 => {
                let shape = match &s[0] {
                    Py::Shape(sh) => shape_str(sh),
                    other => str_of(other),
                };
                format!(
                    "VariableSpec(shape={shape}, dtype={}, trainable={}, alias_id={})",
                    repr(&s[1]),
                    repr(&s[2]),
                    repr(&s[3])
                )
            }
            // TypeSpec.__repr__: "%s%r" % (class name, state).
            _ => format!("{class}{}", repr(state)),
        },
        Py::Opaque { type_name } => format!("<{type_name}>"),
    }
}

/// `type(value).__name__`.
pub(crate) fn type_name(v: &Py) -> String {
    match v {
        Py::None => "NoneType".into(),
        Py::Bool(_) => "bool".into(),
        Py::Int(_) => "int".into(),
        Py::Float(_) => "float".into(),
        Py::Str(_) => "str".into(),
        Py::List(_) => "list".into(),
        Py::Tuple(_) => "tuple".into(),
        Py::Dict(_) => "dict".into(),
        Py::NamedTuple { name, .. } => name.clone(),
        Py::Shape(_) => "TensorShape".into(),
        Py::DType(_) => "DType".into(),
        Py::TensorSpec { bounded, .. } => if *bounded {
            "BoundedTensorSpec"
        } else {
            "TensorSpec"
        }
        .into(),
        Py::TypeSpec { class, .. } => class.clone(),
        Py::Opaque { type_name } => (*type_name).into(),
    }
}

/// Python's truth value (`if value:`).
pub(crate) fn truthy(v: &Py) -> bool {
    match v {
        Py::None => false,
        Py::Bool(b) => *b,
        Py::Int(i) => *i != 0,
        Py::Float(x) => *x != 0.0,
        Py::Str(s) => !s.is_empty(),
        Py::List(x) | Py::Tuple(x) => !x.is_empty(),
        Py::Dict(f) => !f.is_empty(),
        Py::NamedTuple { fields, .. } => !fields.is_empty(),
        Py::Shape(s) => s.as_ref().is_none_or(|d| !d.is_empty()),
        _ => true,
    }
}

/// What iterating `value` yields (`for x in value`), or `None` when Python would raise (or
/// the value is not modelled): a dict yields its keys, a string its characters, a TensorShape
/// its dims.
pub(crate) fn iterate(v: &Py) -> Option<Vec<Py>> {
    match v {
        Py::List(x) | Py::Tuple(x) => Some(x.clone()),
        Py::NamedTuple { fields, .. } => Some(fields.iter().map(|(_, x)| x.clone()).collect()),
        Py::Dict(f) => Some(f.iter().map(|(k, _)| Py::Str(k.clone())).collect()),
        Py::Str(s) => Some(s.chars().map(|c| Py::Str(c.to_string())).collect()),
        Py::Shape(Some(d)) => Some(d.iter().map(|x| x.map_or(Py::None, Py::Int)).collect()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tensor_shape_proto::Dim;
    use crate::proto::{
        DictValue, ListValue, NamedTupleValue, PairValue, TensorSpecProto, TupleValue,
        TypeSpecProto,
    };
    use prost::Message;

    fn sv(k: Kind) -> StructuredValue {
        StructuredValue { kind: Some(k) }
    }

    fn spec(name: &str, dims: &[i64], dtype: i32) -> StructuredValue {
        sv(Kind::TensorSpecValue(TensorSpecProto {
            name: name.into(),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&size| Dim {
                        size,
                        name: String::new(),
                    })
                    .collect(),
                unknown_rank: false,
            }),
            dtype,
        }))
    }

    #[test]
    fn tensor_specs_print_like_tensorflow() {
        let v = decode(&spec("x", &[-1, 3], 1)).unwrap();
        assert_eq!(
            repr(&v),
            "TensorSpec(shape=(None, 3), dtype=tf.float32, name='x')"
        );
        let v = decode(&spec("", &[-1], 7)).unwrap();
        assert_eq!(
            repr(&v),
            "TensorSpec(shape=(None,), dtype=tf.string, name=None)"
        );
        let v = decode(&spec("s", &[], 19)).unwrap();
        assert_eq!(repr(&v), "TensorSpec(shape=(), dtype=tf.float16, name='s')");
        assert_eq!(dtype_py_name(101).as_deref(), Some("float32_ref"));
        assert_eq!(dtype_py_name(0), None);
        assert_eq!(dtype_py_name(99), None);
    }

    #[test]
    fn containers_print_like_python() {
        let t = sv(Kind::TupleValue(TupleValue {
            values: vec![
                sv(Kind::Int64Value(2)),
                sv(Kind::StringValue("a'b".into())),
                sv(Kind::NoneValue(Default::default())),
            ],
        }));
        assert_eq!(str_of(&decode(&t).unwrap()), "(2, \"a'b\", None)");
        let one = sv(Kind::TupleValue(TupleValue {
            values: vec![sv(Kind::BoolValue(true))],
        }));
        assert_eq!(str_of(&decode(&one).unwrap()), "(True,)");
        let mut d = DictValue::default();
        d.fields.insert("k".into(), sv(Kind::Float64Value(1e-5)));
        assert_eq!(
            str_of(&decode(&sv(Kind::DictValue(d))).unwrap()),
            "{'k': 1e-05}"
        );
        let n = sv(Kind::NamedTupleValue(NamedTupleValue {
            name: "Point".into(),
            values: vec![PairValue {
                key: "x".into(),
                value: Some(sv(Kind::ListValue(ListValue::default()))),
            }],
        }));
        assert_eq!(str_of(&decode(&n).unwrap()), "Point(x=[])");
        let ragged = sv(Kind::TypeSpecValue(Box::new(TypeSpecProto {
            type_spec_class: 3,
            type_state: Some(Box::new(sv(Kind::TupleValue(TupleValue {
                values: vec![
                    sv(Kind::TensorShapeValue(TensorShapeProto {
                        dim: vec![
                            Dim {
                                size: -1,
                                name: String::new()
                            };
                            2
                        ],
                        unknown_rank: false,
                    })),
                    sv(Kind::TensorDtypeValue(1)),
                    sv(Kind::Int64Value(1)),
                    sv(Kind::TensorDtypeValue(9)),
                ],
            })))),
            type_spec_class_name: "RaggedTensorSpec".into(),
            num_flat_components: 2,
        })));
        assert_eq!(
            str_of(&decode(&ragged).unwrap()),
            "RaggedTensorSpec(TensorShape([None, None]), tf.float32, 1, tf.int64)"
        );
    }

    #[test]
    fn undecodable_values_are_errors_not_panics() {
        // No kind, bad dtypes, unknown TypeSpec classes, invalid namedtuples.
        assert!(decode(&StructuredValue::default()).is_err());
        assert!(decode(&sv(Kind::TensorDtypeValue(0))).is_err());
        assert!(decode(&sv(Kind::TensorDtypeValue(i32::MIN))).is_err());
        assert!(decode(&spec("x", &[1], 1234)).is_err());
        for class in [0, 11, 14, -1, i32::MAX] {
            let t = sv(Kind::TypeSpecValue(Box::new(TypeSpecProto {
                type_spec_class: class,
                type_state: Some(Box::new(sv(Kind::NoneValue(Default::default())))),
                type_spec_class_name: String::new(),
                num_flat_components: 0,
            })));
            assert!(decode(&t).is_err(), "{class}");
        }
        for (name, key) in [
            ("class", "x"),
            ("P", "_x"),
            ("P", "1"),
            ("", "x"),
            ("P", "def"),
        ] {
            let n = sv(Kind::NamedTupleValue(NamedTupleValue {
                name: name.into(),
                values: vec![PairValue {
                    key: key.into(),
                    value: Some(sv(Kind::Int64Value(1))),
                }],
            }));
            assert!(decode(&n).is_err(), "{name} {key}");
        }
        // Deep nesting built in memory (beyond what prost would decode).
        let mut v = sv(Kind::Int64Value(1));
        for _ in 0..1000 {
            v = sv(Kind::ListValue(ListValue { values: vec![v] }));
        }
        assert!(decode(&v).is_err());
    }

    #[test]
    fn hostile_bytes_decode_to_errors_or_values() {
        // Every prefix and every single-byte corruption of a real-looking encoding: prost
        // decoding and the renderer must never panic.
        let mut d = DictValue::default();
        d.fields.insert("a".into(), spec("a", &[-1, 3], 1));
        let v = sv(Kind::TupleValue(TupleValue {
            values: vec![
                sv(Kind::TupleValue(TupleValue {
                    values: vec![spec("x", &[2], 3), sv(Kind::Float64Value(0.5))],
                })),
                sv(Kind::DictValue(d)),
            ],
        }));
        let bytes = v.encode_to_vec();
        let mut rendered = 0;
        for cut in 0..=bytes.len() {
            if let Ok(m) = StructuredValue::decode(&bytes[..cut]) {
                if let Ok(p) = decode(&m) {
                    let _ = (str_of(&p), repr(&p), type_name(&p), iterate(&p), truthy(&p));
                    rendered += 1;
                }
            }
        }
        for i in 0..bytes.len() {
            for x in [0x00u8, 0xff, 0x80, 0x7f] {
                let mut b = bytes.clone();
                b[i] ^= x;
                if let Ok(m) = StructuredValue::decode(b.as_slice()) {
                    if let Ok(p) = decode(&m) {
                        let _ = (str_of(&p), repr(&p), type_name(&p), iterate(&p));
                    }
                }
            }
        }
        assert!(rendered > 0);
    }
}

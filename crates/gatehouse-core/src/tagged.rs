//! Reading our tagged JSON objects (`{"kind":"audit_rows","rows":[…]}`) without buffering them.
//!
//! serde's derived reader for `#[serde(tag = …)]` and `#[serde(untagged)]` enums first copies the
//! whole value into a tree of its own (the tag may come last), then reads the variant from that
//! copy: a second pass over every guard answer and queue message, and a second reader of each
//! type in the wasm. Every tagged object we write has its tag first (serde's writer of
//! `#[serde(tag = …)]` puts it there, and so does [`super::queue::pack`]), so the tag is read
//! first and the rest of the object goes straight to its variant's reader. An object whose first
//! field is not the tag is refused.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, Visitor};

/// An enum written with its tag first.
pub trait Tagged: Sized {
    /// The name of the tag's field.
    const TAG: &'static str;
    /// The variant the tag names, read from the object's other fields.
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error>;
}

/// Reads a [`Tagged`] value (the body of its `Deserialize` implementation).
pub fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    struct TagFirst<T>(PhantomData<T>);

    impl<'de, T: Tagged> Visitor<'de> for TagFirst<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an object whose first field is \"{}\"", T::TAG)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            match map.next_key::<String>()? {
                Some(key) if key == T::TAG => {}
                _ => return Err(A::Error::custom(format_args!("the first field must be \"{}\"", T::TAG))),
            }
            let tag: String = map.next_value()?;
            T::variant(&tag, MapAccessDeserializer::new(map))
        }
    }

    d.deserialize_map(TagFirst(PhantomData))
}

/// `Deserialize` for [`Tagged`] types: each reads its tag first ([`deserialize`]).
macro_rules! deserialize_tagged {
    ($($tagged:ty),+ $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $tagged {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::tagged::deserialize(d)
            }
        }
    )+};
}
pub(crate) use deserialize_tagged;

/// A variant without fields: `value`, once the object's other fields (none are written) are read past.
pub fn unit<'de, T, D: Deserializer<'de>>(fields: D, value: T) -> Result<T, D::Error> {
    IgnoredAny::deserialize(fields)?;
    Ok(value)
}

/// The one field `name` of a variant (other fields are read past; a missing one is an error).
pub fn field<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    fields: D,
    name: &'static str,
) -> Result<T, D::Error> {
    struct Field<T>(&'static str, PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Field<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "the field \"{}\"", self.0)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == self.0 && found.is_none() {
                    found = Some(map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            found.ok_or_else(|| A::Error::missing_field(self.0))
        }
    }

    fields.deserialize_map(Field(name, PhantomData))
}

/// The error for a tag that names no variant.
pub fn unknown<E: Error>(tag: &str, variants: &'static [&'static str]) -> E {
    E::unknown_variant(tag, variants)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Shape {
        Dot,
        Circle { radius: u32 },
        Square(Side),
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Side {
        side: u32,
        #[serde(default)]
        label: Option<String>,
    }

    impl Tagged for Shape {
        const TAG: &'static str = "kind";
        fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
            match tag {
                "dot" => unit(fields, Shape::Dot),
                "circle" => Ok(Shape::Circle { radius: field(fields, "radius")? }),
                "square" => Side::deserialize(fields).map(Shape::Square),
                other => Err(unknown(other, &["dot", "circle", "square"])),
            }
        }
    }

    deserialize_tagged!(Shape);

    fn read(json: &str) -> Result<Shape, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_what_serde_writes_and_refuses_what_it_cannot_place() {
        for shape in [Shape::Dot, Shape::Circle { radius: 3 }, Shape::Square(Side { side: 2, label: None })] {
            assert_eq!(read(&serde_json::to_string(&shape).unwrap()), Ok(shape));
        }
        // Fields it does not know are read past, in any variant.
        assert_eq!(read(r#"{"kind":"dot","since":1}"#), Ok(Shape::Dot));
        assert_eq!(
            read(r#"{"kind":"circle","color":[1,{"a":2}],"radius":4}"#),
            Ok(Shape::Circle { radius: 4 })
        );
        assert_eq!(
            read(r#"{"kind":"square","side":1,"label":"x","more":null}"#),
            Ok(Shape::Square(Side { side: 1, label: Some("x".into()) }))
        );
        // A tag that is not first, unknown or missing, a missing field, not an object.
        assert!(read(r#"{"radius":4,"kind":"circle"}"#)
            .unwrap_err()
            .contains("first field must be \"kind\""));
        assert!(read(r#"{"kind":"triangle"}"#).unwrap_err().contains("unknown variant `triangle`"));
        assert!(read(r#"{}"#).is_err());
        assert!(read(r#"{"kind":"circle"}"#).unwrap_err().contains("missing field `radius`"));
        assert!(read(r#"{"kind":"square"}"#).unwrap_err().contains("missing field `side`"));
        assert!(read(r#"["dot"]"#).is_err());
        // The rest of the document is still checked.
        assert!(read(r#"{"kind":"dot"} x"#).is_err());
        assert!(read(r#"{"kind":"dot","a":}"#).is_err());
    }
}

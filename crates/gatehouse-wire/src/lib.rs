//! The JSON shapes of Gatehouse's public API that both sides read or write, declared once: the
//! worker builds them (`gatehouse-core`'s views) and the SDK (`gatehouse-client`) reads them.
//! Times are RFC 3339 strings here; the server keeps Unix milliseconds and converts at the view.

use serde::Serialize;

/// A closed set of names the API answers with, as an enum: each name its variant, and any name a
/// newer server may add reads as `Unknown` (an SDK built today still reads tomorrow's answers).
/// Compares with `&str`, so `key.status == "active"` reads as before.
macro_rules! names {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
            /// A name this version does not know (a newer server's).
            #[serde(other, rename = "unknown")]
            Unknown,
        }

        impl $name {
            /// Every name this version knows.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Unknown => "unknown",
                }
            }

            /// A name this version knows (strict: for input, where an unknown name is a mistake).
            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::parse(s).ok_or_else(|| {
                    let known: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                    format!("{s:?} is not a {} ({})", $what, known.join(", "))
                })
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

pub mod digests;
pub mod events;
pub mod identities;
pub mod keys;
pub mod logs;
pub mod resources;
pub mod webhooks;

/// A shape as the JSON value an answer carries (a struct of strings, numbers and JSON values
/// always serialises).
pub fn to_json(shape: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(shape).expect("a wire shape serialises")
}

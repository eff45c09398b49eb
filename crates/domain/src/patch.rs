//! [`Patch`]: an update's field that may be absent (leave it), `null` (clear it) or a value
//! (set it): the three cases a JSON update tells apart and `Option` cannot.

use serde::{Deserialize, Deserializer};

/// One field of an update. Deserialized with `#[serde(default)]` on the field: an absent
/// field is [`Patch::Absent`], `null` is [`Patch::Clear`], anything else [`Patch::Set`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Patch<T> {
    /// Not in the request: unchanged.
    #[default]
    Absent,
    /// `null`: cleared.
    Clear,
    /// A value: set.
    Set(T),
}

impl<T> Patch<T> {
    /// Whether the request names the field (cleared or set).
    pub fn is_given(&self) -> bool {
        !matches!(self, Patch::Absent)
    }

    /// The value when set.
    pub fn as_set(&self) -> Option<&T> {
        match self {
            Patch::Set(v) => Some(v),
            _ => None,
        }
    }

    /// What the field becomes given its current value: unchanged, `None`, or the new one.
    pub fn apply(self, current: Option<T>) -> Option<T> {
        match self {
            Patch::Absent => current,
            Patch::Clear => None,
            Patch::Set(v) => Some(v),
        }
    }

    /// The same patch over a converted value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Patch<U> {
        match self {
            Patch::Absent => Patch::Absent,
            Patch::Clear => Patch::Clear,
            Patch::Set(v) => Patch::Set(f(v)),
        }
    }

    /// The same patch over a converted value that may fail.
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Patch<U>, E> {
        Ok(match self {
            Patch::Absent => Patch::Absent,
            Patch::Clear => Patch::Clear,
            Patch::Set(v) => Patch::Set(f(v)?),
        })
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only called when the field is present (absent: `#[serde(default)]`).
        Ok(match Option::<T>::deserialize(d)? {
            None => Patch::Clear,
            Some(v) => Patch::Set(v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Update {
        #[serde(default)]
        name: Patch<String>,
    }

    fn parse(json: &str) -> Patch<String> {
        serde_json::from_str::<Update>(json).map(|u| u.name).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn absent_null_and_a_value_are_three_cases() {
        assert_eq!(parse("{}"), Patch::Absent);
        assert_eq!(parse(r#"{"name":null}"#), Patch::Clear);
        assert_eq!(parse(r#"{"name":"x"}"#), Patch::Set("x".to_string()));
        assert!(serde_json::from_str::<Update>(r#"{"name":1}"#).is_err(), "the value's type is checked");
    }

    #[test]
    fn apply_keeps_clears_or_sets() {
        assert_eq!(Patch::Absent.apply(Some(1)), Some(1));
        assert_eq!(Patch::<i32>::Clear.apply(Some(1)), None);
        assert_eq!(Patch::Set(2).apply(Some(1)), Some(2));
        assert!(!Patch::<i32>::Absent.is_given() && Patch::<i32>::Clear.is_given());
        assert_eq!(Patch::Set(2).map(|v| v * 2), Patch::Set(4));
    }
}

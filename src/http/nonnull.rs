//! `#[serde(default, deserialize_with = "nonnull::value")]`: an optional field may be absent, but
//! not `null` (the API description does not allow null, and silently reading `null` as "absent"
//! would hide client bugs such as a lost variable).

use serde::{Deserialize, Deserializer};

pub fn value<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[serde(default, deserialize_with = "super::value")]
        x: Option<f64>,
    }

    #[test]
    fn absent_is_none_null_is_an_error() {
        assert_eq!(serde_json::from_str::<Body>("{}").unwrap().x, None);
        assert_eq!(
            serde_json::from_str::<Body>(r#"{"x": 2}"#).unwrap().x,
            Some(2.0)
        );
        assert!(serde_json::from_str::<Body>(r#"{"x": null}"#).is_err());
    }
}

//! JSON Schema building blocks of the API description, which is generated from the code
//! (`http::openapi` renders it as openapi.yaml): the schemas a derive cannot express are built
//! with these.
//!
//! utoipa's schema model has no field for some JSON Schema keywords the contract needs (`const`,
//! and assertions such as "exactly one of `counts` and `table`"). [`constant`] and [`asserting`]
//! put them in a schema's extensions, which utoipa serialises flat into the schema object. Each
//! schema object gets at most ONE such keyword (several assertions go into one `allOf`): the
//! extensions are a hash map, so with two keys the rendered order would change from run to run.
//!
//! Mainstream client generators build a model from an object's `properties` and ignore
//! assertion-only subschemas, so assertions keep the description as strict as the server without
//! costing a generated client anything (scripts/ci/openapi-client.sh checks one).

use serde_json::Value;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, RefBuilder, Schema,
    SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};

/// What a schema builder takes: a schema or a `$ref` to one.
pub type SchemaRef = RefOr<Schema>;

/// `$ref` to the component schema `name`.
pub fn component(name: &str) -> SchemaRef {
    RefOr::Ref(Ref::from_schema_name(name))
}

/// `$ref` to the component schema `name`, described where it is used.
pub fn described(name: &str, description: &str) -> SchemaRef {
    RefBuilder::new()
        .ref_location_from_schema_name(name)
        .description(Some(description))
        .build()
        .into()
}

pub fn number() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Number)
}

pub fn integer() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer)
}

pub fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

pub fn boolean() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean)
}

/// The whitespace trimmed around a name (Unicode `White_Space`), as the body of a character class.
const NAME_SPACE: &str = r"\x09-\x0d \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";

/// The characters no name may hold, of the Basic Multilingual Plane: general categories Cc, Cf,
/// Zl and Zp (tests/it/openapi/examples.rs holds this list to `ledger::names` over every BMP
/// character, so a Unicode update that adds one fails there). Written as `\x`/`\u` escapes,
/// which ECMA-262, Python's `re` and Rust's `regex` all read alike; the planes above cannot be
/// written so for all three.
const NAME_REFUSED: &str = r"\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb";

/// What every name and label is (`ledger::names`), for the descriptions.
pub const NAME_RULE: &str = "Surrounding whitespace is trimmed; what is left must have 1 to 200 \
    characters, none of them a control character (Unicode general category Cc), a format \
    character (Cf: zero-width spaces and joiners, the byte order mark, soft hyphens, \
    bidirectional controls, tag characters…) or a line or paragraph separator (Zl, Zp). It is \
    stored in Unicode Normalization Form C (NFC), so a name sent precomposed or decomposed is \
    one name. The pattern lists the refused characters of the Basic Multilingual Plane; those \
    above it are refused too.";

/// One name or label as sent: 1 to 200 characters between optional surrounding whitespace, none
/// refused ([`NAME_RULE`]).
pub fn name() -> ObjectBuilder {
    let (space, refused) = (NAME_SPACE, NAME_REFUSED);
    let inner = crate::ledger::MAX_NAME_CHARS - 2;
    string().pattern(Some(format!(
        "^[{space}]*[^{refused}{space}](?:[^{refused}]{{0,{inner}}}[^{refused}{space}])?[{space}]*$"
    )))
}

/// A block key (src/ledger/blocks.rs), of any period: the dataset's period decides which form
/// it must have.
pub fn block_key() -> ObjectBuilder {
    string()
        .pattern(Some(
            "^[0-9]{4}-(W[0-9]{2}|[0-9]{2}(-[0-9]{2}(T[0-9]{2})?)?)$".to_string(),
        ))
        .description(Some(
            "A block of a dataset split over time (UTC), in the form of the dataset's period: \
             `2026-12-05T13` (hour), `2026-12-05` (day), `2026-W49` (ISO 8601 week), `2026-12` \
             (month). A key of another form or an impossible date (2026-02-30, a week 53 in a \
             year without one) is 422 naming the field.",
        ))
}

/// `{from, to}`: the blocks a release reads.
pub fn block_span() -> ObjectBuilder {
    closed()
        .description(Some(
            "The blocks a release reads on a dataset split into blocks, `from` to `to` \
             inclusive (at most `max_block_range`, 400 by default): the release is charged its \
             full cost on every one of them. On such a dataset a release, preview or charge \
             names `blocks` or `block` (exactly one; 422 without); on another, either is 422.",
        ))
        .property("from", component("BlockKey"))
        .property("to", component("BlockKey"))
        .required("from")
        .required("to")
}

/// A dataset's block period.
pub fn block_period() -> ObjectBuilder {
    string()
        .enum_values(Some(["hour", "day", "week", "month"]))
        .description(Some(
            "The UTC period a record's block is chosen by, from the time of the event it \
             records (never the time it was sent or stored).",
        ))
}

/// A string of the given format (`uuid`, `date-time`, `uri-reference`...).
pub fn formatted(format: &str) -> ObjectBuilder {
    string().format(Some(SchemaFormat::Custom(format.to_string())))
}

/// An object that may have other properties than those it lists.
pub fn object() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Object)
}

/// An object that has exactly the properties it lists (`additionalProperties: false`).
pub fn closed() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

/// A number > `bound`.
pub fn above(bound: f64) -> ObjectBuilder {
    number().exclusive_minimum(Some(bound))
}

/// A number in [`min`, `max`].
pub fn between(min: f64, max: f64) -> ObjectBuilder {
    number().minimum(Some(min)).maximum(Some(max))
}

/// JSON `null`: the second arm of a [`nullable`] value.
pub fn null() -> SchemaRef {
    ObjectBuilder::new().schema_type(Type::Null).into()
}

/// `schema` or `null`.
pub fn nullable(schema: impl Into<SchemaRef>) -> OneOfBuilder {
    OneOfBuilder::new().item(schema).item(null())
}

pub fn one_of(items: impl IntoIterator<Item = SchemaRef>) -> OneOfBuilder {
    items
        .into_iter()
        .fold(OneOfBuilder::new(), |one_of, item| one_of.item(item))
}

pub fn array(items: impl Into<SchemaRef>) -> ArrayBuilder {
    ArrayBuilder::new().items(items.into())
}

/// Exactly `value`: a string or an integer `const` (client generators read it as a literal type).
pub fn constant(value: impl Into<Value>) -> ObjectBuilder {
    let value = value.into();
    let kind = if value.is_string() {
        Type::String
    } else if value.is_i64() || value.is_u64() {
        Type::Integer
    } else {
        panic!("constant: {value} is neither a string nor an integer")
    };
    ObjectBuilder::new()
        .schema_type(SchemaType::new(kind))
        .extensions(Some(keyword("const", value)))
}

/// `object` with the assertions `all` (JSON Schema subschemas that hold no properties of their
/// own: `oneOf` of `required` lists, `if`/`then`/`else`, `not`) as its `allOf`.
pub fn asserting(object: ObjectBuilder, all: impl IntoIterator<Item = Value>) -> ObjectBuilder {
    object.extensions(Some(keyword(
        "allOf",
        Value::Array(all.into_iter().collect()),
    )))
}

/// "Exactly one of `a` and `b` is present", as an assertion for [`asserting`].
pub fn exactly_one_of(a: &str, b: &str) -> Value {
    serde_json::json!({"oneOf": [{"required": [a]}, {"required": [b]}]})
}

fn keyword(name: &str, value: Value) -> Extensions {
    Extensions::from_iter([(name, value)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords_are_rendered_flat_in_the_schema() {
        let schema: SchemaRef = constant("dirichlet").into();
        assert_eq!(
            serde_json::to_value(&schema).unwrap(),
            json!({"type": "string", "const": "dirichlet"})
        );
        let schema: SchemaRef = asserting(closed(), [exactly_one_of("counts", "table")]).into();
        assert_eq!(
            serde_json::to_value(&schema).unwrap(),
            json!({
                "type": "object",
                "additionalProperties": false,
                "allOf": [{"oneOf": [{"required": ["counts"]}, {"required": ["table"]}]}]
            })
        );
        let schema: SchemaRef = nullable(above(1.0)).into();
        assert_eq!(
            serde_json::to_value(&schema).unwrap(),
            json!({"oneOf": [{"type": "number", "exclusiveMinimum": 1}, {"type": "null"}]})
        );
    }
}

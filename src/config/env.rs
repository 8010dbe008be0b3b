//! The environment overlay: names to keys, strings to typed values.

use super::{Config, ConfigError, ENV_PREFIX, OPTIONAL_STRING_KEYS, Table, Value};

/// The type of a key, taken from its default value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Boolean,
    String,
    List,
}

/// Sets the key `var` names in `table` to `raw`, typed as in `schema`
/// (the serialized defaults), and checks the result still fits the
/// config tree so a bad value is blamed on its variable.
pub(super) fn apply(
    schema: &Table,
    table: &mut Table,
    var: &str,
    raw: &str,
) -> Result<(), ConfigError> {
    let err = |message: String| ConfigError::Env {
        var: var.to_owned(),
        message,
    };
    let (section, key, kind) = resolve(schema, var).ok_or_else(|| {
        err(
            "names no configuration key (expected PUSHGATE_<SECTION>_<KEY>, \
             for example PUSHGATE_SERVER_LISTEN)"
                .to_owned(),
        )
    })?;
    let value =
        convert(kind, raw).map_err(|expected| err(format!("bad value {raw:?}: {expected}")))?;
    let Some(Value::Table(section_table)) = table.get_mut(&section) else {
        return Err(err(format!("section [{section}] is missing")));
    };
    section_table.insert(key, value);
    table
        .clone()
        .try_into::<Config>()
        .map_err(|de| err(format!("bad value {raw:?}: {}", de.message())))?;
    Ok(())
}

/// The section, key and kind `var` names, if any.
fn resolve(schema: &Table, var: &str) -> Option<(String, String, Kind)> {
    let name = var.strip_prefix(ENV_PREFIX)?.to_ascii_lowercase();
    let (section, key) = name.split_once('_')?;
    let Value::Table(fields) = schema.get(section)? else {
        return None;
    };
    let kind = match fields.get(key) {
        Some(default) => kind_of(default)?,
        None if OPTIONAL_STRING_KEYS.contains(&(section, key)) => Kind::String,
        None => return None,
    };
    Some((section.to_owned(), key.to_owned(), kind))
}

/// The kind of a default value; `None` for types the tree never uses.
fn kind_of(value: &Value) -> Option<Kind> {
    match value {
        Value::Integer(_) => Some(Kind::Integer),
        Value::Boolean(_) => Some(Kind::Boolean),
        Value::String(_) => Some(Kind::String),
        Value::Array(_) => Some(Kind::List),
        _ => None,
    }
}

/// `raw` as a TOML value of `kind`, or what was expected.
fn convert(kind: Kind, raw: &str) -> Result<Value, &'static str> {
    let trimmed = raw.trim();
    match kind {
        Kind::Integer => trimmed
            .parse()
            .map(Value::Integer)
            .map_err(|_| "expected an integer"),
        Kind::Boolean => match trimmed {
            "true" => Ok(Value::Boolean(true)),
            "false" => Ok(Value::Boolean(false)),
            _ => Err("expected true or false"),
        },
        Kind::String => Ok(Value::String(raw.to_owned())),
        Kind::List => Ok(Value::Array(
            trimmed
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| Value::String(item.to_owned()))
                .collect(),
        )),
    }
}

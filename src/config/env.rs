//! The environment overlay: names to keys, strings to typed values.
//!
//! Not every `PUSHGATE_*` variable is meant for the overlay. Kubernetes
//! injects variables for every Service of a namespace into every pod (a
//! Service `pushgate` gives `PUSHGATE_SERVICE_HOST`, `PUSHGATE_PORT`,
//! `PUSHGATE_PORT_8080_TCP_ADDR`, ...), and scripts keep their own
//! (`PUSHGATE_BIN`). The rule, in order:
//!
//! 1. a variable that names a key sets it (a real key always wins);
//! 2. one in a shape Kubernetes injects for a Service whose name starts
//!    with `pushgate` is ignored;
//! 3. one whose first word after `PUSHGATE_` is no section is ignored;
//! 4. anything else names a section with a key it does not have
//!    (`PUSHGATE_SERVER_LISTN`): an error, like a typo in the file.
//!
//! Ignored variables are returned, so the binary can list them in one
//! warning line at start.

use super::{Config, ConfigError, ENV_PREFIX, OPTIONAL_STRING_KEYS, Table, Value};

/// The type of a key, taken from its default value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Boolean,
    String,
    List,
}

/// What the overlay did with one variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// It set its key.
    Set,
    /// It is not meant for the overlay (rules 2 and 3 above).
    Ignored,
}

/// Sets the key `var` names in `table` to `raw`, typed as in `schema`
/// (the serialized defaults), and checks the result still fits the
/// config tree so a bad value is blamed on its variable. A variable that
/// is not meant for the overlay is left alone.
pub(super) fn apply(
    schema: &Table,
    table: &mut Table,
    var: &str,
    raw: &str,
) -> Result<Applied, ConfigError> {
    let err = |message: String| ConfigError::Env {
        var: var.to_owned(),
        message,
    };
    let Some((section, key, kind)) = resolve(schema, var) else {
        if is_service_link(var) || !names_a_section(schema, var) {
            return Ok(Applied::Ignored);
        }
        return Err(err(
            "names no configuration key (expected PUSHGATE_<SECTION>_<KEY>, \
             for example PUSHGATE_SERVER_LISTEN)"
                .to_owned(),
        ));
    };
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
    Ok(Applied::Set)
}

/// Whether the first word of `var` after the prefix is a section.
fn names_a_section(schema: &Table, var: &str) -> bool {
    let Some(name) = var.strip_prefix(ENV_PREFIX) else {
        return false;
    };
    let section = name.split('_').next().unwrap_or("").to_ascii_lowercase();
    matches!(schema.get(&section), Some(Value::Table(_)))
}

/// Whether `var` is one Kubernetes injects for a Service whose name starts
/// with `pushgate` (upper-cased, `-` as `_`), `SVC` below:
/// `SVC_SERVICE_HOST`, `SVC_SERVICE_PORT`, `SVC_SERVICE_PORT_<NAME>`,
/// `SVC_PORT`, `SVC_PORT_<n>_<PROTO>` and its `_PROTO`, `_PORT`, `_ADDR`.
pub(super) fn is_service_link(var: &str) -> bool {
    let words: Vec<&str> = var.split('_').collect();
    if words.first() != Some(&"PUSHGATE") {
        return false;
    }
    // Any split after the first word may end the service name: a Service
    // may itself be called `pushgate-port` or `pushgate-service`.
    (1..words.len()).any(|end| is_link_suffix(&words[end..]))
}

/// The part of a service link variable after the service name.
fn is_link_suffix(words: &[&str]) -> bool {
    const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
    let port_number =
        |w: &str| !w.is_empty() && w.len() <= 5 && w.bytes().all(|b| b.is_ascii_digit());
    match words {
        ["SERVICE", "HOST"] | ["SERVICE", "PORT"] | ["PORT"] => true,
        ["SERVICE", "PORT", name @ ..] => name.iter().all(|w| !w.is_empty()),
        ["PORT", number, protocol] => port_number(number) && PROTOCOLS.contains(protocol),
        ["PORT", number, protocol, "PROTO" | "PORT" | "ADDR"] => {
            port_number(number) && PROTOCOLS.contains(protocol)
        }
        _ => false,
    }
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

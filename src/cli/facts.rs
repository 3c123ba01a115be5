//! `hunt --facts FILE`: the facts of a system in a TOML file to check in, turned into the
//! command line's own flags before clap reads them, so that clap's definitions stay the one
//! list of names, values and rules. A key is a hunt flag's long name without its dashes
//! (`stock-query = "..."`), a repeatable flag takes an array (`header = ["A: b"]`), a switch
//! takes `true`; a flag given on the command line wins over the file's.
//! `lockctl hunt init` prints every fact as a commented template.

use std::ffi::OsString;
use std::fmt::Write as _;

use clap::{Arg, ArgAction, CommandFactory};

use super::Cli;

/// The flags a facts file may set: `hunt`'s and the global ones (not help, version, the file
/// itself).
fn settable() -> Vec<Arg> {
    let cli = Cli::command();
    let mut args: Vec<Arg> = Vec::new();
    if let Some(hunt) = cli.find_subcommand("hunt") {
        args.extend(hunt.get_arguments().cloned());
    }
    // The connection's global flags; how the output looks is the caller's, not a fact.
    args.extend(
        cli.get_arguments()
            .filter(|a| a.is_global_set() && a.get_help_heading() != Some("Output"))
            .cloned(),
    );
    args.retain(|a| {
        a.get_long()
            .is_some_and(|l| !matches!(l, "help" | "version" | "facts"))
    });
    args
}

/// `args` (the whole command line, program first) with the facts of a `hunt --facts FILE`
/// put in as flags right after `hunt`, those the command line gives itself left out. An
/// unchanged command line when there is no `--facts`; an error (a usage error) naming the
/// file and the key at fault.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some((hunt, file)) = facts_file(&words) else {
        return Ok(args);
    };
    let text = read_capped(&file)?;
    let table: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("--facts '{file}' is not TOML: {e}"))?;
    let known = settable();
    let given = given_on_command_line(&words[1..], &known);
    let mut added: Vec<OsString> = Vec::new();
    for (key, item) in table.iter() {
        let Some(arg) = known.iter().find(|a| a.get_long() == Some(key)) else {
            let hint = closest(key, &known)
                .map(|c| format!("; did you mean '{c}'?"))
                .unwrap_or_default();
            return Err(format!(
                "--facts '{file}': '{key}' is not a hunt flag (keys are the long flag names without their dashes){hint}"
            ));
        };
        if given.iter().any(|g| g == key) {
            continue;
        }
        let wrong = |what: &str| format!("--facts '{file}': '{key}' {what}");
        let value = item
            .as_value()
            .ok_or_else(|| wrong("must be a value, not a table"))?;
        added.extend(flag_words(arg, key, value).map_err(wrong)?);
    }
    let mut out = args;
    out.splice(hunt + 1..hunt + 1, added);
    Ok(out)
}

/// The most a facts file may hold. A system's facts are a page of TOML; a file this big is
/// the wrong file, or no file at all (`/dev/zero`, a pipe that never ends), and reading it
/// whole would take the machine's memory first.
pub const FACTS_MAX_BYTES: u64 = 1024 * 1024;

/// The text of the facts file `file`, read no further than [`FACTS_MAX_BYTES`] and one byte
/// (to tell a file of exactly the limit from a longer one): an endless file is refused after
/// that much, not read until memory runs out.
fn read_capped(file: &str) -> Result<String, String> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| format!("--facts '{file}' cannot be read: {e}");
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(FACTS_MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > FACTS_MAX_BYTES {
        return Err(format!(
            "--facts '{file}' is larger than {} MiB, the most a facts file may hold (is it the facts file? `lockctl hunt init` writes one)",
            FACTS_MAX_BYTES / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("--facts '{file}' is not UTF-8 text: {e}"))
}

/// Where `hunt` is among the command line's `words`, and the file its `--facts` names; `None`
/// for any other command, or a hunt without `--facts`.
fn facts_file(words: &[String]) -> Option<(usize, String)> {
    let hunt = words.iter().skip(1).position(|w| w == "hunt")? + 1;
    let mut file = None;
    for (i, w) in words.iter().enumerate().skip(hunt + 1) {
        if w == "--facts" {
            file = words.get(i + 1).cloned();
        } else if let Some(f) = w.strip_prefix("--facts=") {
            file = Some(f.to_string());
        }
    }
    Some((hunt, file?))
}

/// The command-line words that set flag `arg` (the facts file's `key`) to `value`: a switch
/// given or not, each item of a repeatable flag's array, or the one value. `Err` says what is
/// wrong with the value, after its key.
fn flag_words(
    arg: &Arg,
    key: &str,
    value: &toml_edit::Value,
) -> Result<Vec<OsString>, &'static str> {
    let flag = format!("--{key}");
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let repeatable = matches!(arg.get_action(), ArgAction::Append);
    match value {
        toml_edit::Value::Boolean(b) if switch => Ok(match *b.value() {
            true => vec![flag.into()],
            false => Vec::new(),
        }),
        _ if switch => Err("is a switch: write true or false"),
        toml_edit::Value::Array(items) if repeatable => items
            .iter()
            .map(|v| match scalar(v) {
                Some(v) => Ok(format!("{flag}={v}").into()),
                None => Err("must be an array of strings or numbers"),
            })
            .collect(),
        toml_edit::Value::Array(_) => Err("takes one value, not an array"),
        v => match scalar(v) {
            Some(v) => Ok(vec![format!("{flag}={v}").into()]),
            None => Err("must be a string or a number"),
        },
    }
}

/// A string or number as the command line would carry it.
fn scalar(v: &toml_edit::Value) -> Option<String> {
    match v {
        toml_edit::Value::String(s) => Some(s.value().clone()),
        toml_edit::Value::Integer(i) => Some(i.value().to_string()),
        toml_edit::Value::Float(f) => Some(f.value().to_string()),
        _ => None,
    }
}

/// The long names of the flags `words` (the command line after the program) gives, short
/// ones (`-n`) by their long names.
fn given_on_command_line(words: &[String], known: &[Arg]) -> Vec<String> {
    let mut given = Vec::new();
    for w in words {
        if let Some(long) = w.strip_prefix("--") {
            given.push(long.split('=').next().unwrap_or(long).to_string());
        } else if let Some(short) = w.strip_prefix('-').and_then(|s| s.chars().next())
            && let Some(a) = known.iter().find(|a| a.get_short() == Some(short))
        {
            given.extend(a.get_long().map(str::to_string));
        }
    }
    given
}

/// The flag name nearest `key` (by edit distance), when one is near enough to be a typo.
fn closest<'a>(key: &str, known: &'a [Arg]) -> Option<&'a str> {
    known
        .iter()
        .filter_map(Arg::get_long)
        .map(|l| (distance(key, l), l))
        .filter(|(d, _)| *d <= 3.max(key.len() / 3))
        .min()
        .map(|(_, l)| l)
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// Examples for the template, where a flag's default or value name says too little.
const EXAMPLES: [(&str, &str); 31] = [
    ("fault-ms", "\"2000..6000\""),
    ("preset", "\"tutorial\""),
    (
        "login",
        r#"'POST http://127.0.0.1:8080/api/login {"username":"{user}","password":"..."}'"#,
    ),
    ("token", "\"json:/data/token\""),
    ("users-file", "\"users.tsv\""),
    ("stock-key", "\"item:stock:{sku}\""),
    ("stock-clean", "\"DELETE FROM goods WHERE sku = $1\""),
    ("orders-sql", "\"postgres://app@127.0.0.1/shop\""),
    ("users", "100"),
    ("limit", "1"),
    ("proxy", "\"127.0.0.1:7001\""),
    ("stock", "10"),
    ("requests", "40"),
    ("rate", "200"),
    ("seed", "1"),
    ("strategy", "[\"lock\", \"naive\"]"),
    ("junit", "\"hunt.xml\""),
    ("redis", "\"redis://127.0.0.1:6379\""),
    ("tls-ca", "\"ca.pem\""),
    (
        "url",
        "\"http://127.0.0.1:8080/buy?sku={sku}&user={user}&order={order}\"",
    ),
    ("header", "[\"Content-Type: application/json\"]"),
    ("body", "'{\"sku\": \"{sku}\", \"user\": \"{user}\"}'"),
    ("bought-if", "\"bought\""),
    ("sold-out-if", "\"sold out\""),
    ("busy-if", "\"busy\""),
    ("serve", "\"exec php -S 127.0.0.1:8080 -t .\""),
    ("ready", "\"http://127.0.0.1:8080/health\""),
    ("stock-sql", "\"postgres://app@127.0.0.1/shop\""),
    ("stock-query", "\"SELECT stock FROM goods WHERE sku = $1\""),
    (
        "stock-seed",
        "\"INSERT INTO goods (sku, stock) VALUES ($1, $2)\"",
    ),
    (
        "orders-query",
        "\"SELECT order_id, qty, user_id FROM orders WHERE sku = $1\"",
    ),
];

/// `lockctl hunt init`: every fact a file may hold, commented out, with its help and an
/// example, grouped as `hunt --help` groups them.
pub fn template() -> String {
    let mut s = String::from(
        "# The facts of a flash sale, for `lockctl hunt --facts FILE`.\n\
         # Keys are hunt's long flag names without their dashes; a flag given on the command\n\
         # line wins over this file. Uncomment what your system needs; see `lockctl hunt --help`.\n",
    );
    let mut heading = None;
    for arg in settable() {
        let Some(long) = arg.get_long() else { continue };
        let h = arg.get_help_heading().unwrap_or("Options");
        if heading != Some(h.to_string()) {
            let _ = write!(s, "\n## {h}\n");
            heading = Some(h.to_string());
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let _ = writeln!(s);
        for line in wrap(&help, 90) {
            let _ = writeln!(s, "# {line}");
        }
        let _ = writeln!(s, "# {long} = {}", example(&arg, long));
    }
    s
}

fn example(arg: &Arg, long: &str) -> String {
    if let Some((_, e)) = EXAMPLES.iter().find(|(k, _)| *k == long) {
        return (*e).to_string();
    }
    let quoted = |v: &str| {
        if v.parse::<f64>().is_ok() {
            v.to_string()
        } else {
            toml_string(v)
        }
    };
    match arg.get_action() {
        ArgAction::SetTrue => "true".into(),
        _ => {
            let v = match arg.get_default_values().first() {
                Some(d) => d.to_string_lossy().into_owned(),
                None => arg
                    .get_value_names()
                    .and_then(|n| n.first().map(|n| n.to_string()))
                    .unwrap_or_else(|| long.to_uppercase()),
            };
            match arg.get_action() {
                ArgAction::Append => format!("[{}]", quoted(&v)),
                _ => quoted(&v),
            }
        }
    }
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.lines() {
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

/// `v` as a TOML basic string.
fn toml_string(v: &str) -> String {
    let mut s = String::from('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(s, "\\u{:04X}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

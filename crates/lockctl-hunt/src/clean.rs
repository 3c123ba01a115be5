//! What a hunt leaves in the user's stores, removed when it ends: the keys on its Redis that
//! contain one of its own SKUs, and the stock rows of its own SKUs (the facts check's probe
//! and every round's), with a delete statement the user gave or one derived from a stock query
//! simple enough to say which rows it reads. Nothing that is not the hunt's own SKU is touched.

use std::collections::BTreeSet;

use super::sql::{SkuParam, SqlDb};
use lockctl_core::conn::Target;
use lockctl_core::keys::StockKeys;
use lockctl_core::sku::Sku;
use lockctl_hammer::http::ids::IdFormat;

/// What was removed, and what was left and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Keys removed from Redis.
    pub keys: u64,
    /// Stock rows deleted.
    pub rows: u64,
    /// What was left, each in words (which SKUs, where, how to remove them).
    pub left: Vec<String>,
}

/// How many keys one `DEL` removes at most.
const DEL_BATCH: usize = 100;

/// Removes every key on `target` whose name contains one of `skus` whole, found with `SCAN`:
/// text SKUs (`<prefix><number>`) by their prefix, a key that contains the prefix followed by
/// another number left; integer and UUID SKUs by the digits or the UUID in a key, never as a
/// part of a longer number (SKU 7340032001 is not in `item:stock:17340032001`). On a cluster,
/// where one `SCAN` sees one node, only each SKU's stock key (`stock_key`, `{sku}` the SKU;
/// default `item:stock:<SKU>`) is removed. Returns how many keys were removed.
pub fn remove_keys(
    target: &Target,
    skus: &[Sku],
    stock_key: Option<&str>,
) -> lockctl_core::error::Result<u64> {
    if skus.is_empty() {
        return Ok(0);
    }
    let mut conn = target.connect()?;
    let mut doomed: Vec<String> = Vec::new();
    if target.is_cluster() {
        for sku in skus {
            doomed.push(stock_key.map_or_else(
                || StockKeys::new(sku).stock,
                |k| k.replace("{sku}", sku.as_str()),
            ));
        }
    } else {
        let names: BTreeSet<&str> = skus.iter().map(Sku::as_str).collect();
        // One scan per text prefix, and one for the numbers and one for the UUIDs.
        let mut scans: BTreeSet<String> = BTreeSet::new();
        for name in &names {
            scans.insert(match Shape::of(name) {
                Shape::Number => "*[0-9]*".into(),
                Shape::Uuid => "*-*-*-*-*".into(),
                Shape::Text => format!(
                    "*{}*",
                    glob_escape(name.trim_end_matches(|c: char| c.is_ascii_digit()))
                ),
            });
        }
        for pattern in scans {
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = conn.query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000),
                )?;
                doomed.extend(keys.into_iter().filter(|k| names_one(k, &names)));
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
    }
    doomed.sort();
    doomed.dedup();
    let mut removed = 0;
    for batch in doomed.chunks(DEL_BATCH) {
        let n: u64 = conn.query(redis::cmd("DEL").arg(batch))?;
        removed += n;
    }
    Ok(removed)
}

/// The shape of a SKU, for finding it in key names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Digits only: found as a whole run of digits.
    Number,
    /// A UUID: found as one.
    Uuid,
    /// Anything else: found as its text with no digit right after a final digit.
    Text,
}

impl Shape {
    fn of(name: &str) -> Shape {
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
            Shape::Number
        } else if lockctl_hammer::http::ids::is_uuid(name) {
            Shape::Uuid
        } else {
            Shape::Text
        }
    }
}

/// Whether `key` contains one of `names` whole: not the start or the end of a longer run of
/// digits where the name starts or ends with one (so `...-1` is not in `...-12`, nor `42` in
/// `142`).
fn names_one(key: &str, names: &BTreeSet<&str>) -> bool {
    let bytes = key.as_bytes();
    let digit_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    // Each maximal run of digits, as a number SKU would be written.
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while digit_at(i) {
                i += 1;
            }
            if names.contains(&key[start..i]) {
                return true;
            }
        } else {
            i += 1;
        }
    }
    // Each UUID-shaped window.
    if key.len() >= 36 {
        for at in 0..=key.len() - 36 {
            if let Some(w) = key.get(at..at + 36)
                && lockctl_hammer::http::ids::is_uuid(w)
                && names.contains(w)
            {
                return true;
            }
        }
    }
    // Text names, with the boundary rule on digits.
    names
        .iter()
        .filter(|n| Shape::of(n) == Shape::Text)
        .any(|n| {
            key.match_indices(n).any(|(at, _)| {
                let end = at + n.len();
                let starts_digit = n.as_bytes()[0].is_ascii_digit();
                let ends_digit = n.as_bytes()[n.len() - 1].is_ascii_digit();
                let longer_before = starts_digit && at > 0 && digit_at(at - 1);
                let longer_after = ends_digit && digit_at(end);
                !longer_before && !longer_after
            })
        })
}

/// `text` as a `SCAN MATCH` pattern that matches only itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The statement that deletes the rows a stock query reads, when the query is as simple as
/// `SELECT <columns> FROM <table> WHERE <column> = $1` (or `?`): `DELETE FROM <table> WHERE
/// <column> = $1`, which deletes exactly the rows whose key is the SKU given. `None` for any
/// other query (a join, a second condition, a function): then the hunt cannot tell which rows
/// are its own, and deletes none.
pub fn delete_for(query: &str) -> Option<String> {
    let words: Vec<&str> = query
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    let ident = |w: &str| {
        !w.is_empty()
            && w.split('.').all(|part| {
                !part.is_empty()
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !part.starts_with(|c: char| c.is_ascii_digit())
            })
    };
    let from = words.iter().position(|w| w.eq_ignore_ascii_case("from"))?;
    let columns = words.get(1..from)?.join(" ");
    let simple_columns = words.first()?.eq_ignore_ascii_case("select")
        && !columns.is_empty()
        && columns
            .split(',')
            .all(|c| ident(c.trim()) || c.trim() == "*");
    // FROM <table> WHERE <column> = <parameter>, with `=` and the parameter apart or not.
    let rest = words[from + 1..].join(" ");
    let (table, condition) = rest.split_once(' ')?;
    let condition = condition.strip_prefix("WHERE ").or_else(|| {
        condition
            .get(..6)
            .filter(|w| w.eq_ignore_ascii_case("where "))
            .map(|_| &condition[6..])
    })?;
    let (column, parameter) = condition.split_once('=')?;
    let (column, parameter) = (column.trim(), parameter.trim());
    let simple = simple_columns
        && ident(table)
        && ident(column)
        && matches!(parameter, "$1" | "?")
        && !is_keyword(table)
        && !is_keyword(column);
    simple.then(|| format!("DELETE FROM {table} WHERE {column} = {parameter}"))
}

fn is_keyword(w: &str) -> bool {
    [
        "select", "from", "where", "and", "or", "join", "on", "limit", "group", "order",
    ]
    .iter()
    .any(|k| w.eq_ignore_ascii_case(k))
}

/// Deletes the stock rows of `skus` with `statement` (the SKU its one parameter, bound as
/// `format` says) in `db`, into `cleaned`; a SKU whose delete fails is named in `cleaned.left`
/// with the error.
pub fn delete_rows(
    db: &SqlDb,
    statement: &str,
    skus: &[String],
    format: IdFormat,
    cleaned: &mut Cleaned,
) {
    let mut failed = Vec::new();
    for sku in skus {
        let param = SkuParam { text: sku, format };
        match db.delete(statement, param) {
            Ok(n) => cleaned.rows += n,
            Err(e) => failed.push((sku.clone(), e.to_string())),
        }
    }
    if let Some((_, first)) = failed.first() {
        let names: Vec<String> = failed.iter().map(|(s, _)| s.clone()).collect();
        cleaned.left.push(format!(
            "the stock rows of {} could not be deleted with '{statement}' ({first})",
            skus_in_words(&names)
        ));
    }
}

/// `a, b and 3 more`: at most three SKUs by name.
pub fn skus_in_words(skus: &[String]) -> String {
    let shown = skus.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    match skus.len() {
        0..=3 => shown,
        n => format!("{shown} and {} more", n - 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_is_derived_only_from_a_query_that_names_one_table_and_one_key() {
        assert_eq!(
            delete_for("SELECT qty FROM stock WHERE sku = $1").as_deref(),
            Some("DELETE FROM stock WHERE sku = $1")
        );
        assert_eq!(
            delete_for("select qty, sku from shop.stock where sku=?;").as_deref(),
            Some("DELETE FROM shop.stock WHERE sku = ?")
        );
        for refused in [
            "SELECT qty FROM stock WHERE sku = $1 AND warehouse = 'x'",
            "SELECT qty FROM stock s JOIN items i ON i.id = s.id WHERE i.sku = $1",
            "SELECT sum(qty) FROM stock WHERE sku = $1",
            "SELECT qty FROM stock WHERE sku LIKE $1",
            "SELECT qty FROM stock WHERE sku = $1 OR 1 = 1",
            "SELECT qty FROM stock WHERE lower(sku) = $1",
            "SELECT qty FROM stock WHERE sku = 'x'",
            "UPDATE stock SET qty = 1 WHERE sku = $1",
            "SELECT qty FROM (SELECT * FROM stock) t WHERE sku = $1",
        ] {
            assert_eq!(delete_for(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_key_is_the_hunts_only_when_it_names_one_of_its_skus_whole() {
        let names: BTreeSet<&str> = ["hunt-ab12cd-1", "hunt-ab12cd-2"].into_iter().collect();
        assert!(names_one("item:stock:hunt-ab12cd-1", &names));
        assert!(names_one("order:hunt-ab12cd-2:h1-3", &names));
        assert!(!names_one("item:stock:hunt-ab12cd-12", &names));
        assert!(!names_one("item:stock:hunt-ab12cd-", &names));
        assert!(!names_one("item:stock:sku_886", &names));
        // Numbers whole, never a part of a longer one.
        let numbers: BTreeSet<&str> = ["7340032001"].into_iter().collect();
        assert!(names_one("item:stock:7340032001", &numbers));
        assert!(names_one("dist_lock:7340032001", &numbers));
        assert!(names_one("order:7340032001:u3", &numbers));
        assert!(!names_one("item:stock:17340032001", &numbers));
        assert!(!names_one("item:stock:73400320012", &numbers));
        assert!(!names_one("item:stock:734003200", &numbers));
        let uuid = "0b6f8c1e-2a3d-4e5f-8a9b-0c1d2e3f4a5b";
        let uuids: BTreeSet<&str> = [uuid].into_iter().collect();
        assert!(names_one(&format!("item:stock:{uuid}"), &uuids));
        assert!(!names_one(
            "item:stock:0b6f8c1e-2a3d-4e5f-8a9b-0c1d2e3f4a5c",
            &uuids
        ));
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}

//! What a hunt leaves in the user's stores, removed when it ends: the keys on its Redis that
//! contain one of its own SKUs, and the stock rows of its own SKUs (the facts check's probe
//! and every round's), with a delete statement the user gave or one derived from a stock query
//! simple enough to say which rows it reads. Nothing that is not the hunt's own SKU is touched.

use std::collections::BTreeSet;

use super::sql::SqlDb;
use lockctl_core::conn::Target;
use lockctl_core::keys::StockKeys;
use lockctl_core::sku::Sku;

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

/// Removes every key on `target` whose name contains one of `skus` (the rounds' SKUs,
/// `<prefix><number>`), found with `SCAN`: a key that contains the prefix followed by another
/// number is left. On a cluster, where one `SCAN` sees one node, only each SKU's stock key
/// (`stock_key`, `{sku}` the SKU; default `item:stock:<SKU>`) is removed. Returns how many
/// keys were removed.
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
        let prefixes: BTreeSet<&str> = names
            .iter()
            .map(|s| s.trim_end_matches(|c: char| c.is_ascii_digit()))
            .collect();
        for prefix in prefixes {
            let pattern = format!("*{}*", glob_escape(prefix));
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
                doomed.extend(keys.into_iter().filter(|k| names_one(k, prefix, &names)));
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

/// Whether `key` contains `prefix` followed by a whole number that makes one of `names`.
fn names_one(key: &str, prefix: &str, names: &BTreeSet<&str>) -> bool {
    key.match_indices(prefix).any(|(at, _)| {
        let rest = &key[at + prefix.len()..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0 && names.contains(&key[at..at + prefix.len() + digits])
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

/// Deletes the stock rows of `skus` with `statement` (the SKU its one parameter) in `db`,
/// into `cleaned`; a SKU whose delete fails is named in `cleaned.left` with the error.
pub fn delete_rows(db: &SqlDb, statement: &str, skus: &[String], cleaned: &mut Cleaned) {
    let mut failed = Vec::new();
    for sku in skus {
        match db.delete(statement, sku) {
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
        let p = "hunt-ab12cd-";
        assert!(names_one("item:stock:hunt-ab12cd-1", p, &names));
        assert!(names_one("order:hunt-ab12cd-2:h1-3", p, &names));
        assert!(!names_one("item:stock:hunt-ab12cd-12", p, &names));
        assert!(!names_one("item:stock:hunt-ab12cd-", p, &names));
        assert!(!names_one("item:stock:sku_886", p, &names));
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}

//! Statements written with named parameters (`$destination`), numbered once
//! when the statement is built, in the order its bind helper binds them: the
//! text says what each parameter is, and no code counts positions.

use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

/// A statement with its bound values, as the bind helpers build it.
pub type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// `sql` with each named parameter `$name` replaced by `$i`, `i` being the
/// name's place in `names` (from 1), the order the statement's bind helper
/// binds its values in. Numbered parameters (`$1`) are left as they are:
/// `names` then starts with theirs.
///
/// # Panics
///
/// On a name `names` lacks: a statement and its bind helper that disagree,
/// which the statement's tests find before any delivery could.
pub fn numbered(sql: &str, names: &[&str]) -> String {
    let mut numbered = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        numbered.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let name = &rest[..name_len];
        if name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
            let position = names.iter().position(|known| *known == name);
            let position = position.unwrap_or_else(|| panic!("${name} is not a parameter of: {sql}"));
            numbered.push_str(&(position + 1).to_string());
            rest = &rest[name_len..];
        }
    }
    numbered.push_str(rest);
    numbered
}

/// The highest parameter a numbered statement uses, for its tests: the
/// number of values its bind helper must bind.
pub fn parameters(sql: &str) -> usize {
    sql.split('$')
        .skip(1)
        .filter_map(|after| after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// One purge batch: the oldest rows of one kind (`kind`, the condition of
/// an index on `time`, partial or the partition's) of `table` older than
/// `$1` seconds, at most `$2` of them, found again by `key`. The clock is
/// the database's, the same for every replica.
///
/// Why by kind and in time order: a batch is then a range scan of one index
/// that reads the rows it deletes and stops; `SKIP LOCKED`, so that it
/// never waits for a row in use.
pub fn delete_oldest(table: &str, key: &str, kind: &str, time: &str) -> String {
    format!(
        "WITH doomed AS MATERIALIZED (
             SELECT {key} FROM {table}
             WHERE {kind} AND {time} < now() - make_interval(secs => $1::float8)
             ORDER BY {time} LIMIT $2
             FOR UPDATE SKIP LOCKED
         )
         DELETE FROM {table} t USING doomed WHERE t.{key} = doomed.{key}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_parameters_are_numbered_in_the_binding_order_and_numbered_ones_kept() {
        let sql = "SELECT $1, $error::text, $id, $error, least($1, $ids_2)";
        assert_eq!(
            numbered(sql, &["first", "id", "error", "ids_2"]),
            "SELECT $1, $3::text, $2, $3, least($1, $4)"
        );
        assert_eq!(parameters(&numbered(sql, &["first", "id", "error", "ids_2"])), 4);
        assert_eq!(parameters("SELECT 1"), 0);
    }

    #[test]
    #[should_panic(expected = "$unknown is not a parameter")]
    fn a_name_the_binder_lacks_is_refused() {
        numbered("SELECT $unknown", &["known"]);
    }
}

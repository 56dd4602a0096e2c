//! `webhook-inbox migrate`: apply the migrations and exit, for deploys that
//! migrate as a step of their own and then run `serve --no-migrate`.

use std::io::Write;

use anyhow::Context;
use sqlx::PgPool;

use crate::db::MIGRATOR;

/// Applies every pending migration, then says where the schema is.
pub async fn run(pool: &PgPool, out: &mut dyn Write) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await.context("applying migrations")?;
    if let Some(last) = MIGRATOR.iter().last() {
        writeln!(out, "database migrated: at {} ({})", last.version, last.description)?;
    }
    Ok(())
}

//! A private PostgreSQL cluster managed by this process (placeholder).

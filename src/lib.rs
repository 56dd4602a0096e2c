//! webhook-inbox: verified, archived, exactly-once webhook intake.
//!
//! Read top to bottom, the modules follow one delivery through the service.

pub mod db;

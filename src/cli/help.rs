//! How a subcommand's `--help` shows the global options: its own options
//! first, then the global ones once, a line each (flag and variable), with a
//! pointer to `webhook-inbox --help`, which describes them in full. Without
//! this, clap repeats every global option's whole description (some 60
//! lines of database settings) in every subcommand's help.

use clap::{Arg, Command};

/// The heading of that short list.
pub const GLOBAL_SUMMARY: &str = "Global options (`webhook-inbox --help` describes them)";

/// `root` with each subcommand, however deep, showing the global options
/// in short. The options are still accepted before or after any
/// subcommand: each subcommand gets the same option, hidden from its help.
pub fn summarize_global_options(root: Command) -> Command {
    let global: Vec<Arg> = root.get_arguments().filter(|arg| arg.is_global_set()).cloned().collect();
    let summary = summary(&root, &global);
    root.mut_subcommands(|sub| in_short(sub, &global, &summary))
}

fn in_short(command: Command, global: &[Arg], summary: &str) -> Command {
    // clap gives a subcommand a global option only if it lacks one of the
    // same id, so these hidden copies stand in for the shown ones.
    let command = global.iter().fold(command, |command, arg| command.arg(arg.clone().hide(true)));
    command.after_help(summary.to_string()).mut_subcommands(|sub| in_short(sub, global, summary))
}

/// The list: `--flag  [env: VARIABLE]` under the heading, styled as clap
/// styles its own headings.
fn summary(root: &Command, global: &[Arg]) -> String {
    let flags: Vec<(String, String)> = global
        .iter()
        .map(|arg| {
            let flag = format!("--{}", arg.get_long().unwrap_or(arg.get_id().as_str()));
            let env =
                arg.get_env().map(|env| format!("[env: {}]", env.to_string_lossy())).unwrap_or_default();
            (flag, env)
        })
        .collect();
    let width = flags.iter().map(|(flag, _)| flag.len()).max().unwrap_or(0);
    let header = root.get_styles().get_header();
    let mut text = format!("{header}{GLOBAL_SUMMARY}:{header:#}");
    for (flag, env) in flags {
        text.push_str(format!("\n      {flag:width$}  {env}").trim_end());
    }
    text
}

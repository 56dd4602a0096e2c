//! Where the providers' secrets come from: a `--{name}-webhook-secret` flag
//! (environment `{NAME}_WEBHOOK_SECRET`) for each built-in provider,
//! generated from [`BUILT_IN`] so that a new provider brings its own, and
//! `--standard-webhooks` (`STANDARD_WEBHOOKS`) for the senders named by
//! configuration.

use std::collections::BTreeMap;
use std::str::FromStr;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use secrecy::SecretString;

use super::{BUILT_IN, InvalidSecret, KeyError, is_built_in};

/// The argument id of `STANDARD_WEBHOOKS`.
const STANDARD_WEBHOOKS: &str = "standard_webhooks";

/// Longest name of a Standard Webhooks sender: it is a route segment and a `provider` value.
const MAX_NAME_LEN: usize = 64;

/// Every provider's secrets, as configured.
#[derive(Debug, Clone, Default)]
pub struct ProviderConfig {
    /// Each built-in provider's secrets, by name; one without any is disabled (503).
    pub secrets: BTreeMap<&'static str, SecretList>,
    /// The Standard Webhooks senders, each with its secrets.
    pub standard_webhooks: StandardSenders,
}

impl ProviderConfig {
    /// The secrets configured for the built-in provider `name` (none: disabled).
    pub fn secrets_of(&self, name: &str) -> &[SecretString] {
        self.secrets.get(name).map_or(&[], |list| &list.0)
    }
}

/// A comma-separated list of secrets; empty entries are ignored.
#[derive(Clone, Default)]
pub struct SecretList(pub Vec<SecretString>);

impl FromStr for SecretList {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(SecretList(
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(SecretString::from).collect(),
        ))
    }
}

impl std::fmt::Debug for SecretList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[REDACTED; {}]", self.0.len())
    }
}

/// `STANDARD_WEBHOOKS`: comma-separated `name=whsec_...` entries, as given.
/// A name given several times has several secrets (rotation), in order.
///
/// Parsing never fails, so that clap never quotes the value (the secrets) in
/// an error; [`StandardSenders::by_name`] checks the entries.
#[derive(Clone, Default)]
pub struct StandardSenders(Vec<(String, SecretString)>);

impl FromStr for StandardSenders {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let entries = text.split(',').map(str::trim).filter(|entry| !entry.is_empty()).map(|entry| {
            // An entry without `=` is kept with no name, to be refused by position.
            let (name, secret) = entry.split_once('=').unwrap_or(("", entry));
            (name.trim().to_string(), SecretString::from(secret.trim()))
        });
        Ok(StandardSenders(entries.collect()))
    }
}

impl std::fmt::Debug for StandardSenders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|(name, _)| name.as_str()).collect();
        write!(f, "StandardSenders({names:?}, [REDACTED; {}])", self.0.len())
    }
}

impl StandardSenders {
    /// The senders by name, in order of first appearance, each with its
    /// secrets in the order given; refuses names that are not usable.
    pub fn by_name(&self) -> Result<Vec<(&str, Vec<SecretString>)>, ConfigError> {
        let mut senders: Vec<(&str, Vec<SecretString>)> = Vec::new();
        for (index, (name, secret)) in self.0.iter().enumerate() {
            if name.is_empty() {
                return Err(ConfigError::NotNameEqualsSecret(index + 1));
            }
            let valid = name.len() <= MAX_NAME_LEN
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
            if !valid {
                return Err(ConfigError::InvalidName(name.clone()));
            }
            if is_built_in(name) {
                return Err(ConfigError::BuiltInName(name.clone()));
            }
            match senders.iter_mut().find(|(known, _)| known == name) {
                Some((_, secrets)) => secrets.push(secret.clone()),
                None => senders.push((name, vec![secret.clone()])),
            }
        }
        Ok(senders)
    }

    /// The error for `sender`'s secret refused as `invalid`, naming the
    /// entry of the variable it came from (positions count entries, not
    /// the sender's secrets).
    pub fn invalid_secret(&self, sender: &str, invalid: InvalidSecret) -> ConfigError {
        let entry = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| name == sender)
            .nth(invalid.position - 1)
            .map_or(0, |(index, _)| index + 1);
        ConfigError::InvalidSenderSecret { entry, name: sender.to_string(), problem: invalid.problem }
    }
}

/// Provider configuration that cannot be served: `serve` refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A built-in provider's secret that cannot be a key (does not decode, or is short).
    #[error("{variable}: secret #{position} {problem}")]
    InvalidSecret {
        /// Where the secret was configured, e.g. `CLERK_WEBHOOK_SECRET`.
        variable: String,
        /// 1-based, among the variable's comma-separated secrets.
        position: usize,
        /// What is wrong with it; never the secret.
        problem: KeyError,
    },
    /// A `STANDARD_WEBHOOKS` entry whose secret cannot be a key.
    #[error("STANDARD_WEBHOOKS entry #{entry} ({name}=...) {problem}")]
    InvalidSenderSecret {
        /// 1-based position of the entry in the variable.
        entry: usize,
        /// The sender it names.
        name: String,
        /// What is wrong with its secret; never the secret.
        problem: KeyError,
    },
    /// A `STANDARD_WEBHOOKS` entry without `name=`.
    #[error("STANDARD_WEBHOOKS entry #{0} is not name=secret")]
    NotNameEqualsSecret(usize),
    /// A sender name that could not be a route segment.
    #[error("STANDARD_WEBHOOKS: {0:?} is not a name of 1 to 64 lowercase letters, digits, - or _")]
    InvalidName(String),
    /// A sender name taken by a built-in provider.
    #[error("STANDARD_WEBHOOKS: {0} is a built-in provider, configured with its own variable")]
    BuiltInName(String),
}

impl Args for ProviderConfig {
    fn augment_args(command: Command) -> Command {
        let command = BUILT_IN.iter().fold(command, |command, spec| {
            command.arg(
                Arg::new(format!("{}_webhook_secret", spec.name))
                    .long(format!("{}-webhook-secret", spec.name))
                    .env(spec.secret_variable())
                    .hide_env_values(true)
                    .value_name("SECRETS")
                    .value_parser(clap::value_parser!(SecretList))
                    .help(format!(
                        "{} Each at least 16 bytes once decoded. Unset or empty: /webhooks/{} answers 503.",
                        spec.secret_help, spec.name
                    )),
            )
        });
        command.arg(
            Arg::new(STANDARD_WEBHOOKS)
                .long("standard-webhooks")
                .env("STANDARD_WEBHOOKS")
                .hide_env_values(true)
                .value_name("NAME=SECRET,...")
                .value_parser(clap::value_parser!(StandardSenders))
                .help(
                    "Senders that follow the Standard Webhooks spec, as name=whsec_... entries, \
                     comma-separated; each is served at /webhooks/{name}. Repeat a name for a rotation. \
                     Each secret at least 16 bytes once decoded.",
                ),
        )
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl FromArgMatches for ProviderConfig {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let secrets = BUILT_IN
            .iter()
            .filter_map(|spec| {
                let list = matches.get_one::<SecretList>(&format!("{}_webhook_secret", spec.name))?;
                Some((spec.name, list.clone()))
            })
            .collect();
        let standard_webhooks =
            matches.get_one::<StandardSenders>(STANDARD_WEBHOOKS).cloned().unwrap_or_default();
        Ok(ProviderConfig { secrets, standard_webhooks })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn senders(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
        let parsed: StandardSenders = text.parse().unwrap();
        let grouped = parsed.by_name().map_err(|e| e.to_string())?;
        Ok(grouped
            .into_iter()
            .map(|(name, secrets)| {
                (name.to_string(), secrets.iter().map(|s| s.expose_secret().to_string()).collect())
            })
            .collect())
    }

    #[test]
    fn secret_lists_split_on_commas_and_never_debug_print() {
        let list: SecretList = " a , ,b,".parse().unwrap();
        let exposed: Vec<&str> = list.0.iter().map(|s| s.expose_secret()).collect();
        assert_eq!(exposed, ["a", "b"]);
        assert_eq!(format!("{list:?}"), "[REDACTED; 2]");
    }

    #[test]
    fn standard_senders_are_grouped_by_name_in_order_and_keep_base64_padding() {
        let grouped = senders(" acme=whsec_a== , globex=whsec_g,acme=whsec_b ,").unwrap();
        assert_eq!(
            grouped,
            [
                ("acme".into(), vec!["whsec_a==".into(), "whsec_b".into()]),
                ("globex".into(), vec!["whsec_g".into()])
            ]
        );
        assert_eq!(senders("").unwrap(), []);
    }

    #[test]
    fn unusable_standard_sender_names_are_refused_without_showing_a_secret() {
        assert_eq!(
            senders("a=whsec_x,whsec_secret").unwrap_err(),
            "STANDARD_WEBHOOKS entry #2 is not name=secret"
        );
        assert_eq!(
            senders("Acme=whsec_secret").unwrap_err(),
            r#"STANDARD_WEBHOOKS: "Acme" is not a name of 1 to 64 lowercase letters, digits, - or _"#
        );
        assert!(senders("a/b=whsec_x").is_err());
        assert!(senders(&format!("{}=whsec_x", "a".repeat(65))).is_err());
        assert_eq!(
            senders("paddle=whsec_secret").unwrap_err(),
            "STANDARD_WEBHOOKS: paddle is a built-in provider, configured with its own variable"
        );
        let parsed: StandardSenders = "acme=whsec_secret".parse().unwrap();
        assert!(!format!("{parsed:?}").contains("whsec_secret"));
    }

    #[test]
    fn every_built_in_provider_gets_a_secret_flag_with_an_environment_fallback() {
        let command = ProviderConfig::augment_args(Command::new("test"));
        let matches = command
            .try_get_matches_from([
                "test",
                "--clerk-webhook-secret",
                "whsec_1,whsec_2",
                "--standard-webhooks",
                "a=b",
            ])
            .unwrap();
        let config = ProviderConfig::from_arg_matches(&matches).unwrap();
        assert_eq!(config.secrets_of("clerk").len(), 2);
        assert!(config.secrets_of("paddle").is_empty());
        assert_eq!(config.standard_webhooks.by_name().unwrap()[0].0, "a");

        let command = ProviderConfig::augment_args(Command::new("test"));
        for spec in BUILT_IN {
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_long() == Some(&format!("{}-webhook-secret", spec.name)));
            let env = arg.and_then(|arg| arg.get_env()).map(|env| env.to_string_lossy().into_owned());
            assert_eq!(env, Some(spec.secret_variable()), "{}", spec.name);
        }
    }
}

//! AWS named profiles: the credentials, region and endpoint of `AWS_PROFILE` (or the
//! `default` profile) from the shared files the AWS CLI and boto3 write,
//! `~/.aws/credentials` and `~/.aws/config` (`AWS_SHARED_CREDENTIALS_FILE`,
//! `AWS_CONFIG_FILE`), for `object_store`'s S3 client, which reads only the environment.
//!
//! The order is boto3's: credentials in the environment win over any profile; a profile
//! gives what the environment does not. Only static keys are read from a profile
//! (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`); a profile that
//! gets its credentials another way (SSO, a role to assume, a process) is refused in one
//! line that says how to export them. A secret read from a profile is blanked out of every
//! message as the environment's are ([`super::redacted`]).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// What a profile gives the S3 client.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// `aws_access_key_id`.
    pub key_id: Option<String>,
    /// `aws_secret_access_key`.
    pub secret: Option<String>,
    /// `aws_session_token`.
    pub token: Option<String>,
    /// `region` (from the config file).
    pub region: Option<String>,
    /// `endpoint_url` (from the config file).
    pub endpoint: Option<String>,
}

/// The sections of an INI file as the AWS CLI reads it: `[name]` headers, `key = value`
/// lines, `#` and `;` comments; keys lower-cased.
fn sections(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_string();
            out.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(sec), Some((k, v))) = (&current, line.split_once('=')) {
            out.entry(sec.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

fn home_file(var: &str, rel: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(rel)),
    }
}

/// Whether a variable is set to something.
fn set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// The profile to apply to an S3 client, read from `credentials` and `config` (their
/// texts; `None` when missing), for the profile `name`: `Ok(None)` when there is nothing
/// to apply.
///
/// # Errors
/// [`Error::Invalid`] when `name` was asked for (`AWS_PROFILE`) and is in neither file,
/// or gets its credentials in a way this reads not.
pub fn resolve(
    name: &str,
    asked: bool,
    credentials: Option<&str>,
    config: Option<&str>,
    env_has_keys: bool,
) -> Result<Option<Profile>> {
    let creds = credentials.map(sections).unwrap_or_default();
    let conf = config.map(sections).unwrap_or_default();
    // the config file names profiles `[profile NAME]`, but for `[default]`
    let conf_section = conf
        .get(&format!("profile {name}"))
        .or_else(|| (name == "default").then(|| conf.get("default")).flatten());
    let cred_section = creds.get(name);
    if cred_section.is_none() && conf_section.is_none() {
        return if asked {
            Err(Error::invalid(format!(
                "AWS_PROFILE={name}: no such profile in the AWS credentials or config file \
                 (~/.aws/credentials, ~/.aws/config, or AWS_SHARED_CREDENTIALS_FILE, \
                 AWS_CONFIG_FILE)"
            )))
        } else {
            Ok(None)
        };
    }
    let get = |k: &str| {
        cred_section
            .and_then(|s| s.get(k))
            .or_else(|| conf_section.and_then(|s| s.get(k)))
            .cloned()
    };
    let mut p = Profile {
        region: conf_section.and_then(|s| s.get("region")).cloned(),
        endpoint: conf_section.and_then(|s| s.get("endpoint_url")).cloned(),
        ..Profile::default()
    };
    if !env_has_keys {
        p.key_id = get("aws_access_key_id");
        p.secret = get("aws_secret_access_key");
        p.token = get("aws_session_token");
        let other = [
            "sso_start_url",
            "sso_session",
            "role_arn",
            "credential_process",
        ]
        .into_iter()
        .find(|k| get(k).is_some());
        if p.key_id.is_none()
            && let Some(how) = other
        {
            return Err(Error::invalid(format!(
                "AWS profile {name}: its credentials come by {how}, which tilestream does \
                 not read; export them first: eval \"$(aws configure export-credentials \
                 --profile {name} --format env)\""
            )));
        }
    }
    Ok(Some(p))
}

/// The profile of this process's environment ([`resolve`] on the shared files), its
/// secrets registered for redaction; `Ok(None)` when no profile applies (keys in the
/// environment and nothing else asked, no files, `AWS_SKIP_SIGNATURE`).
///
/// # Errors
/// As [`resolve`].
pub fn from_env() -> Result<Option<Profile>> {
    if std::env::var("AWS_SKIP_SIGNATURE").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let asked = std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty());
    let env_has_keys = set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY");
    if env_has_keys && asked.is_none() && set("AWS_REGION") {
        return Ok(None);
    }
    let read = |f: Option<PathBuf>| f.and_then(|f| std::fs::read_to_string(f).ok());
    let credentials = read(home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"));
    let config = read(home_file("AWS_CONFIG_FILE", ".aws/config"));
    let name = asked.clone().unwrap_or_else(|| "default".into());
    let p = resolve(
        &name,
        asked.is_some(),
        credentials.as_deref(),
        config.as_deref(),
        env_has_keys,
    )?;
    if let Some(p) = &p {
        for s in [&p.secret, &p.token, &p.key_id].into_iter().flatten() {
            super::add_secret(s);
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREDS: &str = "[default]\naws_access_key_id = AKIADEF\naws_secret_access_key = s1\n\n\
        # a comment\n[work]\naws_access_key_id=AKIAWORK\naws_secret_access_key = s2\n\
        aws_session_token = t2\n";
    const CONF: &str = "[default]\nregion = eu-west-1\n[profile work]\nregion = us-east-2\n\
        endpoint_url = http://127.0.0.1:9000\n[profile sso]\nsso_session = corp\n";

    #[test]
    fn profiles_read_as_the_aws_cli_reads_them() {
        let work = resolve("work", true, Some(CREDS), Some(CONF), false)
            .expect("resolves")
            .expect("a profile");
        assert_eq!(
            work,
            Profile {
                key_id: Some("AKIAWORK".into()),
                secret: Some("s2".into()),
                token: Some("t2".into()),
                region: Some("us-east-2".into()),
                endpoint: Some("http://127.0.0.1:9000".into()),
            }
        );
        let def = resolve("default", false, Some(CREDS), Some(CONF), false)
            .expect("resolves")
            .expect("a profile");
        assert_eq!(def.key_id.as_deref(), Some("AKIADEF"));
        assert_eq!(def.region.as_deref(), Some("eu-west-1"));
        // keys in the environment win: the profile gives only its region
        let env = resolve("work", true, Some(CREDS), Some(CONF), true)
            .expect("resolves")
            .expect("a profile");
        assert_eq!(
            (env.key_id, env.region.as_deref()),
            (None, Some("us-east-2"))
        );
        // no files, nothing asked: nothing; a profile asked for and missing: refused
        assert_eq!(
            resolve("default", false, None, None, false).expect("resolves"),
            None
        );
        let e = resolve("nope", true, Some(CREDS), Some(CONF), false).expect_err("refused");
        assert!(e.to_string().contains("no such profile"), "{e}");
        let e = resolve("sso", true, Some(CREDS), Some(CONF), false).expect_err("refused");
        assert!(e.to_string().contains("export-credentials"), "{e}");
    }
}

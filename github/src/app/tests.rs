use std::process::Command;
use std::time::{Duration, SystemTime};

use super::*;

/// A fresh 2048-bit key in the form GitHub downloads (`openssl genrsa` writes PKCS#8 since
/// OpenSSL 3; `-traditional` gives GitHub's PKCS#1).
pub(crate) fn test_key(traditional: bool) -> String {
    let mut command = Command::new("openssl");
    command.arg("genrsa");
    if traditional {
        command.arg("-traditional");
    }
    let out = command.arg("2048").output();
    let Ok(out) = out else {
        panic!("openssl is needed to make a test key (apt-get install openssl)");
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_default()
}

#[test]
fn a_jwt_verifies_under_the_apps_public_key_and_nothing_else() {
    for traditional in [true, false] {
        let pem = test_key(traditional);
        let app = App::new("12345", &pem, "http://127.0.0.1:1").map_err(|e| e.to_string());
        let Ok(app) = app else { panic!("{app:?}") };
        let now = SystemTime::now();
        let jwt = app.jwt(now).unwrap_or_default();
        let public = public_key_of(&pem).unwrap_or_default();
        let claims = verify_jwt(&public, &jwt, now);
        assert_eq!(claims.as_ref().map(|c| c.iss.as_str()), Ok("12345"));
        let claims = claims.unwrap_or_else(|e| panic!("{e}"));
        assert!(claims.exp - claims.iat <= 600);
        // Expired ten minutes later.
        assert!(verify_jwt(&public, &jwt, now + Duration::from_secs(600)).is_err());
        // Another key's signature is refused.
        let other = public_key_of(&test_key(true)).unwrap_or_default();
        assert!(verify_jwt(&other, &jwt, now).is_err());
        // So is an altered claim.
        let mut parts: Vec<&str> = jwt.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(r#"{"iat":1,"exp":9999999999,"iss":"12345"}"#);
        parts[1] = &forged;
        assert!(verify_jwt(&public, &parts.join("."), now).is_err());
    }
}

#[test]
fn keys_that_cannot_work_are_refused_with_what_is_wrong() {
    let err = |pem: &str| App::new("1", pem, "http://x").err().map(|e| e.to_string());
    assert!(err("").unwrap_or_default().contains("no PEM block"));
    assert!(
        err("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
            .unwrap_or_default()
            .contains("found BEGIN CERTIFICATE")
    );
    assert!(
        err("-----BEGIN RSA PRIVATE KEY-----\n!!\n-----END RSA PRIVATE KEY-----")
            .unwrap_or_default()
            .contains("not base64")
    );
    assert!(
        err("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----")
            .unwrap_or_default()
            .contains("not a usable RSA private key")
    );
    assert!(
        App::new(" ", &test_key(true), "http://x")
            .err()
            .is_some_and(|e| e.to_string().contains("id is empty"))
    );
}

#[test]
fn a_token_is_fresh_until_ten_minutes_before_it_expires() {
    let now = SystemTime::now();
    let token = |left: u64| InstallationToken {
        token: "ghs_x".into(),
        expires_at: now + Duration::from_secs(left),
        installation_id: 1,
    };
    assert!(fresh(&token(3600), now));
    assert!(!fresh(&token(600), now));
    assert!(!fresh(&token(0), now));
    assert!(!format!("{:?}", token(1)).contains("ghs_x"));
}

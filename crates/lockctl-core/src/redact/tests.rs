//! The one redaction rule, case by case.

use super::*;

// From the Redis URL rule (conn::errors).

#[test]
fn a_url_loses_its_password_only() {
    assert_eq!(
        redact("redis://alice:s3cret@host:6380/2"),
        "redis://alice:***@host:6380/2"
    );
    assert_eq!(redact("redis://:s3cret@host"), "redis://:***@host");
    assert_eq!(redact("redis://host:6379"), "redis://host:6379");
}

#[test]
fn malformed_urls_lose_whatever_looks_like_credentials() {
    for (bad, shown) in [
        ("redis//:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
        ("redis:/:S3cr3tPW@127.0.0.1:6379", "***@127.0.0.1:6379"),
        ("redis:S3cr3tPW@h", "***@h"),
        ("://u:S3cr3tPW@h", "***@h"),
        ("x y:S3cr3tPW@a@h", "***@h"),
        ("S3cr3tPW@127.0.0.1:6390", "***@127.0.0.1:6390"),
        (
            "redis://S3cr3tPW@127.0.0.1:99999",
            "redis://***@127.0.0.1:99999",
        ),
        ("redis://alice:S3cr3tPW@h/2", "redis://alice:***@h/2"),
        // A password holding '/', '?' or '#' is hidden whole.
        ("redis://:ab/S3cr3tPW@h", "redis://:***@h"),
        ("postgres://u:ab?S3cr3tPW@h/d", "postgres://u:***@h/d"),
        ("http://u:ab#S3cr3tPW@h/", "http://u:***@h/"),
    ] {
        assert_eq!(redact(bad), shown, "{bad}");
    }
    assert_eq!(redact("localhost:6379"), "localhost:6379");
}

#[test]
fn scrub_removes_the_password_from_any_text() {
    let url = "redis://u:hunter2@h:1";
    assert_eq!(scrub("bad hunter2 here", url), "bad *** here");
    assert_eq!(
        scrub("cannot open redis://u:hunter2@h:1 now", url),
        "cannot open redis://u:***@h:1 now"
    );
}

// From the PostgreSQL rule (orders::dburl).

#[test]
fn key_value_passwords_are_hidden_quoted_or_not() {
    assert_eq!(
        redact("host=127.0.0.1 password=s3cret user=u port=1"),
        "host=127.0.0.1 password=*** user=u port=1"
    );
    assert_eq!(
        redact("password = 'a b\\'c' host=h"),
        "password = *** host=h"
    );
    assert_eq!(redact("host=h PASSWORD=x"), "host=h PASSWORD=***");
    // A secret's ending makes a word run together a secret's name.
    assert_eq!(redact("host=h mypassword=x"), "host=h mypassword=***");
    assert_eq!(
        redact("host=h sslpassword=k passfile=/p/.pgpass"),
        "host=h sslpassword=*** passfile=/p/.pgpass"
    );
}

#[test]
fn a_key_value_string_keeps_a_user_name_with_an_at_sign() {
    assert_eq!(
        redact("host=db.example user=admin@srv password=pw dbname=d"),
        "host=db.example user=admin@srv password=*** dbname=d"
    );
    // Not libpq's keys: the '@' rule applies, and what is before it goes.
    assert_eq!(redact("pw=x@h"), "***@h");
}

#[test]
fn url_passwords_are_hidden_in_the_user_info_and_the_query() {
    assert_eq!(
        redact("postgres://u:s3cret@h/db?password=two&sslmode=disable"),
        "postgres://u:***@h/db?password=***&sslmode=disable"
    );
    // A lone word before the '@' of a SQL URL is its user name (libpq's and MySQL's grammar),
    // no secret; in a Redis or web URL it may be a password typed there.
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(
        redact("MySQL://root@h:3306/shop"),
        "MySQL://root@h:3306/shop"
    );
    assert_eq!(redact("redis://pw@h"), "redis://***@h");
    assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    assert_eq!(
        redact("postgres://h/db?PassWord=x&user=u"),
        "postgres://h/db?PassWord=***&user=u"
    );
}

#[test]
fn scrub_removes_every_password_from_a_message() {
    let url = "host=h password='p w' user=u";
    assert_eq!(scrub("failed for p w at h", url), "failed for *** at h");
    let url = "postgres://u:s3cret@h/db";
    assert_eq!(scrub("bad s3cret", url), "bad ***");
    let url = "postgres://u@h/db?password=p%40ss&sslmode=disable";
    assert_eq!(scrub("bad p@ss, p%40ss", url), "bad ***, ***");
}

// From the HTTP rule (hammer::http::request).

#[test]
fn a_web_url_keeps_an_at_sign_after_its_host() {
    assert_eq!(
        redact("http://me:secret@h:1/p?q=a@b"),
        "http://me:***@h:1/p?q=a@b"
    );
    assert_eq!(redact("http://h/p"), "http://h/p");
    assert_eq!(
        redact("http://h:8080/users/@me?mail=a@b.c"),
        "http://h:8080/users/@me?mail=a@b.c"
    );
    assert_eq!(redact("http://me@h/p"), "http://***@h/p");
}

#[test]
fn password_like_query_parameters_are_hidden_in_any_url() {
    for (url, shown) in [
        (
            "http://h/buy?token=T1&sku={sku}",
            "http://h/buy?token=***&sku={sku}",
        ),
        ("http://h/?API_KEY=k&a=1", "http://h/?API_KEY=***&a=1"),
        ("http://h/?apikey=k", "http://h/?apikey=***"),
        (
            "http://h/?x=1&access_token=t",
            "http://h/?x=1&access_token=***",
        ),
        ("http://h/?Auth=a;pwd=p", "http://h/?Auth=***"),
        ("http://h/?pass=p&secret=s", "http://h/?pass=***&secret=***"),
        ("http://h/?client_secret=s", "http://h/?client_secret=***"),
        ("http://h/cb#access_token=t", "http://h/cb#access_token=***"),
        ("redis://h:1/0?password=p", "redis://h:1/0?password=***"),
        ("http://h/?author=a&tokens=2", "http://h/?author=a&tokens=2"),
    ] {
        assert_eq!(redact(url), shown, "{url}");
    }
}

#[test]
fn credential_headers_lose_their_values() {
    for (header, shown) in [
        ("Authorization: Bearer T", "Authorization: ***"),
        (
            "proxy-authorization: Basic dTpw",
            "proxy-authorization: ***",
        ),
        ("Cookie: a=1; session=S", "Cookie: ***"),
        ("X-Api-Key:K", "X-Api-Key: ***"),
        ("X-Auth-Token: T", "X-Auth-Token: ***"),
        ("Authorization Bearer T", "Authorization ***"),
        ("X-Sku: {sku}", "X-Sku: {sku}"),
        ("Referer: http://u:p@h/", "Referer: http://u:***@h/"),
        ("Content-Type: text/plain", "Content-Type: text/plain"),
    ] {
        assert_eq!(redact_header(header), shown, "{header}");
    }
    // Any argument written as a credential header is recognised as one.
    assert_eq!(redact("Authorization: Bearer T"), "Authorization: ***");
    assert_eq!(redact("sku:1"), "sku:1");
}

#[test]
fn scrub_removes_a_headers_token() {
    let source = "Authorization: Bearer T0ken";
    assert_eq!(scrub("rejected T0ken", source), "rejected ***");
}

#[test]
fn a_command_line_shows_no_secret_in_any_form() {
    let line = redact_command_line([
        "lockctl",
        "--redis",
        "redis://:rpw@h:1",
        "--lock-node=redis://u:lpw@h:2",
        "hammer",
        "--db",
        "host=h user=u password=dpw dbname=d",
        "--db=postgres://u@h/d?password=dpw2",
        "--url",
        "http://me:upw@h/buy?token=utok&sku={sku}",
        "--header",
        "Authorization: Bearer btok",
        "--header=X-Api-Key: akey",
        "--header",
        "X-Sku: {sku}",
        "--stock-sql",
        "mysql://u:spw@h/shop",
        "--orders-sql=postgres://u:opw@h/shop",
        "--api-token",
        "ftok",
        "--password=fpw",
        "--stock-key",
        "item:stock:s",
        "--quiet",
        "--secret",
        "qsec",
        "-n",
        "100",
    ]);
    let text = line.join(" ");
    for secret in [
        "rpw", "lpw", "dpw", "dpw2", "upw", "utok", "btok", "akey", "spw", "opw", "ftok", "fpw",
        "qsec",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(
        line,
        [
            "lockctl",
            "--redis",
            "redis://:***@h:1",
            "--lock-node=redis://u:***@h:2",
            "hammer",
            "--db",
            "host=h user=u password=*** dbname=d",
            "--db=postgres://u@h/d?password=***",
            "--url",
            "http://me:***@h/buy?token=***&sku={sku}",
            "--header",
            "Authorization: ***",
            "--header=X-Api-Key: ***",
            "--header",
            "X-Sku: {sku}",
            "--stock-sql",
            "mysql://u:***@h/shop",
            "--orders-sql=postgres://u:***@h/shop",
            "--api-token",
            "***",
            "--password=***",
            "--stock-key",
            "item:stock:s",
            "--quiet",
            "--secret",
            "***",
            "-n",
            "100",
        ]
    );
}

/// The secrets of each argument, as the replay takes them out.
fn spans_of(flag: Option<&str>, arg: &str) -> Vec<String> {
    secret_spans(flag, arg)
        .into_iter()
        .map(|(a, b)| arg[a..b].to_string())
        .collect()
}

#[test]
fn secret_spans_are_the_secrets_values_and_nothing_around_them() {
    assert_eq!(spans_of(Some("--redis"), "redis://:pw@h:1"), ["pw"]);
    assert_eq!(
        spans_of(Some("--redis"), "redis://u:p%40w@h:1/0"),
        ["p%40w"]
    );
    // A user's name is no secret: the URL's reader takes a lone word for one.
    assert!(spans_of(Some("--stock-sql"), "postgres://postgres@127.0.0.1/shop").is_empty());
    assert_eq!(
        spans_of(
            None,
            "--stock-sql=postgres://u:pw@h/d?sslpassword=x&sslmode=require"
        ),
        ["pw", "x"]
    );
    assert_eq!(
        spans_of(Some("--header"), "Authorization: Bearer t0k"),
        ["Bearer t0k"]
    );
    assert_eq!(
        spans_of(Some("--header"), "Authorization Bearer t0k"),
        ["Bearer t0k"]
    );
    assert_eq!(spans_of(None, "--header=Cookie: s=1; t=2"), ["s=1; t=2"]);
    assert_eq!(
        spans_of(Some("--header"), "Idempotency-Key: {order}"),
        ["{order}"]
    );
    assert!(spans_of(Some("--header"), "X-Sku: {sku}").is_empty());
    assert_eq!(
        spans_of(
            Some("--url"),
            "http://h/buy?api_key=k1&idempotency_key={order}&sku={sku}"
        ),
        ["k1", "{order}"]
    );
    assert_eq!(spans_of(Some("--password"), "pw"), ["pw"]);
    assert_eq!(spans_of(None, "--api-token=t"), ["t"]);
    assert!(spans_of(Some("--body"), "email=a@b.com&qty=1").is_empty());
    assert!(spans_of(Some("--stock-key"), "item:stock:{sku}").is_empty());
    assert_eq!(
        spans_of(Some("--url"), "http://h/?password=&token=t"),
        ["t"]
    );
    assert_eq!(
        spans_of(
            Some("--serve"),
            "DB='postgres://u:pw@h/d' R=redis://:rp@h:1 exec php -S 127.0.0.1:8080"
        ),
        ["pw", "rp"]
    );
}

#[test]
fn a_json_bodys_password_like_values_are_hidden_and_placeholders_stay() {
    let login = r#"POST http://h/login {"user":"{user}","password":"hunter2", "pin": 1234, "token":"{token}"}"#;
    let shown = redact(login);
    assert_eq!(
        shown,
        r#"POST http://h/login {"user":"{user}","password":"***", "pin": ***, "token":"{token}"}"#
    );
    // A quote escaped inside the password does not end it.
    assert_eq!(
        redact(r#"{"passwd": "a\"b", "n": 1}"#),
        r#"{"passwd": "***", "n": 1}"#
    );
    assert_eq!(redact(r#"{"api_key": 99}"#), r#"{"api_key": ***}"#);
    // The replay line fills each range from the environment: the text between the quotes.
    let spans = secret_spans(Some("--login"), login);
    let hidden: Vec<&str> = spans.iter().map(|&(a, b)| &login[a..b]).collect();
    assert_eq!(hidden, ["hunter2", "1234"]);
    assert!(!scrub("it said hunter2", login).contains("hunter2"));
}

/// Issue 50, item 7: a secret's name in any case and with any separators. The login bodies of
/// real shops (`userPassword`, `loginPwd`, `newPassword`, `accessToken`, `pin`) were printed
/// whole in the replay line, the history, the HTML page and the JUnit file: the rule knew
/// snake_case names only.
#[test]
fn secret_names_are_matched_by_their_words_in_any_case_and_with_any_separator() {
    for name in [
        "password",
        "userPassword",
        "UserPassword",
        "user_password",
        "user-password",
        "user.password",
        "USER_PASSWORD",
        "new-password",
        "newPassword",
        "loginPwd",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "clientSecret",
        "token",
        "accessToken",
        "access_token",
        "AccessToken",
        "X-Access-Token",
        "refreshToken",
        "pin",
        "PIN",
        "pinCode",
        "userPin",
        "pin2",
        "apikey",
        "apiKey",
        "APIKey",
        "api_key",
        "x-api-key",
        "auth",
        "authToken",
        "oauth2Token",
        "credential",
        "credentials",
        "session",
        "sessionId",
        "PHPSESSID",
        "cookie",
        "sessionCookie",
    ] {
        assert!(is_secret_key(name), "{name}");
        let body = format!(r#"{{"user":"u1","{name}":"S3cr3tValue"}}"#);
        assert_eq!(
            redact(&body),
            format!(r#"{{"user":"u1","{name}":"***"}}"#),
            "{name}"
        );
        let form = format!("user=u1&{name}=S3cr3tValue");
        assert_eq!(redact(&form), format!("user=u1&{name}=***"), "{name}");
    }
}

/// Found by an attack round (issue 50): environment variables and server flags inside a
/// `--serve` command, and a credential after `Basic` in a header no name marks as secret.
#[test]
fn secrets_run_together_or_given_to_a_servers_flag_are_hidden() {
    assert_eq!(
        redact("PGPASSWORD=hunter2 DB_PASSWD=h2 exec php -S 127.0.0.1:8080"),
        "PGPASSWORD=*** DB_PASSWD=*** exec php -S 127.0.0.1:8080"
    );
    assert_eq!(
        redact("redis-server --port 7001 --requirepass hunter2 --save ''"),
        "redis-server --port 7001 --requirepass *** --save ''"
    );
    assert_eq!(
        redact("mysqld --password hunter2 --user root"),
        "mysqld --password *** --user root"
    );
    assert_eq!(redact("ADMINPASS=h2 ok"), "ADMINPASS=*** ok");
    // Outside a URL a value runs to the next space (a form body: over-hidden, never shown).
    assert_eq!(redact("a=1&sign=abc&b=2"), "a=1&sign=***");
    assert_eq!(
        redact_header("X-Upstream: Basic dXNlcjpwdw=="),
        "X-Upstream: Basic ***"
    );
    // A flag whose value is another flag has none to hide.
    assert_eq!(redact("app --token --verbose"), "app --token --verbose");
}

#[test]
fn words_that_only_contain_a_secrets_letters_are_no_secrets() {
    for name in [
        "spinner",
        "pinned",
        "opinion",
        "shipping",
        "author",
        "tokens",
        "passfile",
        "compass",
        "bypass",
        "userName",
        "sku",
        "qty",
        "keyboard",
        "sessions_count",
    ] {
        assert!(!is_secret_key(name), "{name}");
        let body = format!(r#"{{"{name}":"v1"}}"#);
        assert_eq!(redact(&body), body, "{name}");
    }
}

/// The login bodies the issue names, as `--login` takes them: each password hidden in what
/// the reports show, and a range of its own for the replay to take from the environment.
#[test]
fn camel_case_login_bodies_lose_their_passwords() {
    for (body, secret) in [
        (
            r#"POST http://h/login {"userName":"{user}","userPassword":"Hunter2Pw"}"#,
            "Hunter2Pw",
        ),
        (
            r#"POST http://h/login {"loginName":"{user}","loginPwd":"Hunter2Pw"}"#,
            "Hunter2Pw",
        ),
        (
            r#"POST http://h/reset {"user":"{user}","newPassword":"Hunter2Pw"}"#,
            "Hunter2Pw",
        ),
        (
            r#"POST http://h/login {"user":"{user}","accessToken":"Hunter2Pw"}"#,
            "Hunter2Pw",
        ),
        (
            r#"POST http://h/login {"user":"{user}","pin":"4711"}"#,
            "4711",
        ),
    ] {
        let shown = redact(body);
        assert!(!shown.contains(secret), "{shown}");
        let line = redact_command_line(["lockctl", "hunt", "--login", body]).join(" ");
        assert!(!line.contains(secret), "{line}");
        assert_eq!(spans_of(Some("--login"), body), [secret], "{body}");
    }
    // As a header: every word-matched name is a credential header.
    assert_eq!(redact_header("X-User-Pwd: p"), "X-User-Pwd: ***");
    assert_eq!(redact_header("X-Pin: 1234"), "X-Pin: ***");
    assert_eq!(redact_header("X-Spinner: 1"), "X-Spinner: 1");
}

/// Issue 50, item 10: `--token` says where the token is in a login's answer; a pattern is no
/// secret, and the replay line shows it as typed.
#[test]
fn a_token_pattern_is_no_secret_but_a_token_is() {
    assert!(spans_of(Some("--token"), "json:/data/accessToken").is_empty());
    assert!(spans_of(None, "--token=json:/jwt").is_empty());
    assert!(spans_of(Some("--token"), r#""tok":"([^"]+)""#).is_empty());
    let line = redact_command_line(["lockctl", "hunt", "--token", "json:/data/accessToken"]);
    assert_eq!(line[3], "json:/data/accessToken");
    // `unlock --token` is a holder's token, and stays hidden.
    assert_eq!(spans_of(Some("--token"), "5f0ce21a"), ["5f0ce21a"]);
    let line = redact_command_line(["lockctl", "unlock", "s", "--token", "5f0ce21a"]);
    assert_eq!(line[4], "***");
}

/// Issue 50, item 9: a login's answer quoted in an error loses its tokens: the values of
/// secret-named keys, a JWT, and long hex or base64 strings; words, numbers and short ids stay.
#[test]
fn an_answer_loses_its_tokens_and_keeps_its_words() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1MSIsImV4cCI6MTcwMDAwMDAwMH0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let answer = format!(
        r#"{{"code":0,"msg":"ok","data":{{"value":"{jwt}","sid":"0123456789abcdef0123","refresh":"aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRva2VuMTIz","session":"s1","userId":42}}}}"#
    );
    let shown = redact_answer(&answer);
    for secret in [
        "eyJhbGciOiJIUzI1NiJ9",
        "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
        "0123456789abcdef0123",
        "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRva2VuMTIz",
        "\"s1\"",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains(r#""code":0,"msg":"ok""#), "{shown}");
    assert!(shown.contains(r#""userId":42"#), "{shown}");
    for kept in [
        r#"{"code":40101,"msg":"wrong password"}"#,
        "/api/v1/orders/123456789012",
        "order 2024-01-01 sold out",
    ] {
        assert_eq!(redact_answer(kept), kept);
    }
}

/// Issue 50, item 8: a key a report names (the longest lease seen) is shown as its pattern;
/// a session key named by a live token showed the token.
#[test]
fn a_keys_random_parts_are_shown_as_a_star_and_the_sku_stays() {
    let sku = "sku_886-hunt-0a0b0c-1";
    for (key, shown) in [
        ("sess:9f86d081884c7d659a2feaa0c55ad015", "sess:*"),
        ("session:550e8400-e29b-41d4-a716-446655440000", "session:*"),
        (
            "user_42_session_Zm9vYmFyYmF6cXV4MTIzNDU2",
            "user_42_session_*",
        ),
        (
            "auth:eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1MSJ9.c2ln:v2",
            "auth:*:v2",
        ),
        ("tok:ab12cd34ef56", "tok:*"),
        ("lock:sku_886-hunt-0a0b0c-1", "lock:sku_886-hunt-0a0b0c-1"),
        (
            "lock:sku_886-hunt-0a0b0c-1:9f86d081884c7d65",
            "lock:sku_886-hunt-0a0b0c-1:*",
        ),
        ("dist_lock:checkout", "dist_lock:checkout"),
        ("orders:user_42:2024-01-01", "orders:user_42:2024-01-01"),
        ("rate:1700000000", "rate:1700000000"),
    ] {
        assert_eq!(key_pattern(key, sku), shown, "{key}");
    }
    // A UUID SKU (`--sku-format uuid`) stays whole.
    let uuid = "550e8400-e29b-41d4-a716-446655440000";
    assert_eq!(
        key_pattern(&format!("lock:{uuid}"), uuid),
        format!("lock:{uuid}")
    );
}

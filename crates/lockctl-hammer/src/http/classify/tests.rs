use super::*;

fn answered(e: Ended) -> (Outcome, Option<i64>) {
    match e {
        Ended::Answered {
            outcome: Some(outcome),
            remaining,
            ..
        } => (outcome, remaining),
        other => panic!("not an answer: {other:?}"),
    }
}

fn patterns(bought: &[&str], sold_out: &[&str], busy: &[&str]) -> Patterns {
    let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect();
    Patterns {
        bought: v(bought),
        sold_out: v(sold_out),
        busy: v(busy),
        ..Patterns::default()
    }
}

#[test]
fn the_tutorials_answers_are_read_as_it_means_them() {
    let c = Classifier::tutorial(&Patterns::default()).unwrap();
    let bought = "扣减成功 | 剩余库存: 9\n".as_bytes();
    assert_eq!(
        answered(c.classify(200, bought)),
        (Outcome::Bought, Some(9))
    );
    let oversold = "扣减成功 | 剩余库存: -1\n".as_bytes();
    assert_eq!(
        answered(c.classify(200, oversold)),
        (Outcome::Bought, Some(-1))
    );
    let sold_out = "已售罄，拦截请求\n".as_bytes();
    assert_eq!(answered(c.classify(200, sold_out)).0, Outcome::SoldOut);
    let busy = "并发过高，请稍后重试\n".as_bytes();
    assert_eq!(answered(c.classify(200, busy)).0, Outcome::Busy);
}

#[test]
fn the_first_match_wins_and_the_rest_are_errors_by_status() {
    let c = Classifier::new(&patterns(&["ok"], &["ok|gone"], &["wait"])).unwrap();
    assert_eq!(answered(c.classify(200, b"ok")).0, Outcome::Bought);
    assert_eq!(answered(c.classify(503, b"please wait")).0, Outcome::Busy);
    let Ended::Failed {
        kind,
        indeterminate,
        message,
        ..
    } = c.classify(500, b"Fatal error\n in x.php")
    else {
        panic!()
    };
    assert_eq!((kind, indeterminate), (ErrorKind::Http(500), true));
    assert_eq!(message, "HTTP 500: 'Fatal error in x.php'");
    let Ended::Failed { kind, message, .. } = c.classify(200, b"") else {
        panic!()
    };
    assert_eq!(kind, ErrorKind::Unclassified);
    assert_eq!(message, "HTTP 200 matched no pattern: (empty body)");
}

#[test]
fn business_codes_in_json_and_status_codes_are_read_and_every_form_of_a_class_must_hold() {
    let c = Classifier::new(&Patterns {
        bought: vec!["json:/code=0".into(), "status:200".into()],
        sold_out: vec!["json:/code=50001".into()],
        busy: vec!["status:429,503".into()],
        refused: vec!["json:/msg=already bought".into()],
        failed: vec!["json:/msg=\"system error\"".into()],
    })
    .unwrap()
    .with_order_from("json:/data/order_no")
    .unwrap();
    let bought = br#"{"code":0,"data":{"order_no":"SO-17"}}"#;
    let Ended::Answered {
        outcome: Some(Outcome::Bought),
        order,
        ..
    } = c.classify(200, bought)
    else {
        panic!()
    };
    assert_eq!(order.as_deref(), Some("SO-17"));
    // `code` 0 as a string is not the number 0; a 201 is not the 200 the class wants.
    assert!(matches!(
        c.classify(200, br#"{"code":"0"}"#),
        Ended::Failed {
            kind: ErrorKind::Unclassified,
            ..
        }
    ));
    assert!(matches!(
        c.classify(201, bought),
        Ended::Failed {
            kind: ErrorKind::Unclassified,
            ..
        }
    ));
    let sold_out = br#"{"code":50001,"msg":"sold out"}"#;
    assert_eq!(answered(c.classify(200, sold_out)).0, Outcome::SoldOut);
    assert_eq!(answered(c.classify(503, b"")).0, Outcome::Busy);
    let refused = br#"{"code":50002,"msg":"already bought"}"#;
    assert_eq!(answered(c.classify(200, refused)).0, Outcome::LimitReached);
    let Ended::Failed {
        kind,
        indeterminate,
        ..
    } = c.classify(200, br#"{"code":500,"msg":"system error"}"#)
    else {
        panic!()
    };
    assert_eq!((kind, indeterminate), (ErrorKind::AnsweredFailed, false));
    // A body that is not JSON holds for no json: form.
    assert!(matches!(
        c.classify(200, b"code=0"),
        Ended::Failed {
            kind: ErrorKind::Unclassified,
            ..
        }
    ));
    let by_group = Classifier::new(&patterns(&["OK"], &[], &[]))
        .unwrap()
        .with_order_from(r"order=(\d+)")
        .unwrap();
    let Ended::Answered { order, .. } = by_group.classify(200, b"OK order=42") else {
        panic!()
    };
    assert_eq!(order.as_deref(), Some("42"));
}

#[test]
fn a_bad_form_names_its_value_and_the_forms_expected() {
    let e = Classifier::new(&patterns(&[], &["(unclosed"], &[])).unwrap_err();
    assert_eq!(e.class, Some(AnswerClass::SoldOut));
    let e = e.to_string();
    assert!(e.starts_with("'(unclosed' is not a valid pattern"), "{e}");
    assert!(
        e.contains("status:CODE[,CODE...] or json:/POINTER=VALUE"),
        "{e}"
    );
    for bad in [
        "status:",
        "status:20x",
        "status:99",
        "json:/code",
        "json:code=0",
    ] {
        let e = Classifier::new(&patterns(&[bad], &[], &[])).unwrap_err();
        assert!(e.to_string().starts_with(&format!("'{bad}' ")), "{e}");
    }
    for bad in ["order=\\d+", "(a)(b)", "json:order_no"] {
        let e = Classifier::default().with_order_from(bad).unwrap_err();
        assert_eq!(e.class, None);
        assert!(e.to_string().starts_with(&format!("'{bad}' ")), "{e}");
    }
    let none = Classifier::new(&Patterns::default()).unwrap();
    assert!(!none.judges());
    assert!(matches!(
        none.classify(204, b""),
        Ended::Answered { outcome: None, .. }
    ));
    assert!(matches!(
        none.classify(404, b"no"),
        Ended::Failed {
            kind: ErrorKind::Http(404),
            ..
        }
    ));
}

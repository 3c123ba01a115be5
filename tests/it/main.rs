//! The integration tests, as one test binary: one module per area, all sharing `support`.
//!
//! One binary links the library once instead of once per file. Run an area alone with
//! `cargo test --test it cli::` (or `fifo::`, `faults::`, ...).

mod support;

mod adversarial;
mod aio;
mod aio_cancel;
mod batch;
mod browser;
mod bucket_attack;
mod buckets;
mod cli;
mod cluster;
mod doc_examples;
mod endpoint;
mod examples;
mod faults;
mod fifo;
mod fresh;
mod fuzz;
mod history;
mod http;
mod http_wire;
mod https;
mod hunt;
mod hunt_attack;
mod hunt_db_faults;
mod hunt_process_faults;
mod hunt_services;
mod hunt_start;
mod hunt_trust;
mod lease;
mod lock;
mod messages;
mod ops;
mod pipeline;
mod pipeline_attack;
mod pipeline_trust;
mod readme;
mod redlock;
mod round_trips;
mod run;
mod scripts;
mod secrets;
mod seed_race;
mod stock;
mod transports;

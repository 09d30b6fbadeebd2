//! The hand-maintained OpenAPI 3 document served at `/openapi.json`.
//! A test in `api` checks that it documents exactly the routes served.

pub const DOCUMENT: &str = include_str!("../openapi.json");

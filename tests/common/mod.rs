#![allow(dead_code)]

pub mod pg;

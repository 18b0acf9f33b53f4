"""One mail: addresses, envelope, message, kinds and templates, call arguments, transports."""

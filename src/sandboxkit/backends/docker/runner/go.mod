module sandboxkit/runner

go 1.19

// Package api is the controller's gRPC API; the generated code is committed.
// Regenerate with `make generate` (needs Debian's protobuf-compiler and
// protoc-gen-go, protoc-gen-go-grpc on PATH).
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative netdir.proto

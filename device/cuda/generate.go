package cuda

//go:generate go run ./internal/ptxgen/cmd/ptxgen -dir kernels

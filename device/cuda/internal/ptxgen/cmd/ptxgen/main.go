package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/meshnode/meshnode/device/cuda/internal/ptxgen"
)

func main() {
	dir := flag.String("dir", "kernels", "directory of the .cu sources")
	flag.Parse()
	c, err := ptxgen.FindCompiler(os.Getenv("MESHNODE_PTX_COMPILER"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
	m, err := ptxgen.Generate(*dir, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
	fmt.Printf("ptxgen: %d PTX files for %s with %s (%s)\n", len(m.PTX), m.Arch, m.Compiler, m.CompilerVersion)
}

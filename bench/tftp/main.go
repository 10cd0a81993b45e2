package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serveHarness(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "tftpbench:", err)
			os.Exit(1)
		}
		return
	}
}

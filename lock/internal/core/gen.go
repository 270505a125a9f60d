//go:build ignore

// gen writes the scripts of lua/ from lua/parts/ (package luagen): run it
// with go generate in this directory.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/seckill-ref/seckill/lock/internal/core/luagen"
)

func main() {
	files, err := luagen.Files(os.DirFS(filepath.Join("lua", "parts")))
	if err != nil {
		log.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join("lua", name), []byte(src), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

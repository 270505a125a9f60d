//go:build ignore

// gen copies shared Lua files into the scripts that carry them, between
// their "-- >>> name" and "-- <<< name" lines (core.Splice):
//
//	go run gen.go -part name=file ... script.lua ...
//
// go generate ./lock/... runs it for every package whose scripts share a
// file (this one's token.lua, which the layers above carry too). Each
// package's tests fail while a copy is out of date.
package main

import (
	"flag"
	"log"
	"os"
	"strings"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

func main() {
	parts := map[string]string{}
	flag.Func("part", "name=file: a shared file and where it is", func(v string) error {
		name, file, _ := strings.Cut(v, "=")
		src, err := os.ReadFile(file)
		parts[name] = string(src)
		return err
	})
	flag.Parse()
	for _, script := range flag.Args() {
		src, err := os.ReadFile(script)
		if err != nil {
			log.Fatal(err)
		}
		out := string(src)
		for name, body := range parts {
			if out, err = core.Splice(out, name, body); err != nil {
				log.Fatalf("%s: %v", script, err)
			}
		}
		if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

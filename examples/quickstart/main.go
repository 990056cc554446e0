package main

import (
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
)

func main() {
	j, err := filejournal.Open("charges.journal", filejournal.Options{}) // keys survive a crash of this process
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	c, err := idem.New(idem.Config{Journal: j}) // every other field has a documented default
	if err != nil {
		log.Fatal(err)
	}

	body := `{"customer":"cus_42","amount":1200,"currency":"usd","reference":"invoice-42"}`
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do("invoice-42", req) // the operation ID is yours and stable; the key is idem's
	if err != nil {
		log.Fatal(err) // idem.ErrUnknown: run again, and it resumes under the same key
	}
	defer resp.Body.Close()
	fmt.Println("charged:", resp.Status, "answered from the journal:", idem.Recorded(resp))
}

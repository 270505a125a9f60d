// Package loadtest runs a flash sale against the seckill HTTP API and proves,
// from the outside, that nothing was oversold.
//
// It is a black-box client: it speaks only the v1 HTTP API (create or read a
// product, buy, list orders) and never imports the service's packages, so the
// same test judges one replica, several replicas behind round-robin, or a
// load balancer, whatever lock mode they run.
//
// It may be used from other modules. The only package of this module it
// imports is internal/apiclient, a client of the same HTTP API, whose
// types it exports as the aliases Product, Order and APIError.
//
// A run has four phases:
//
//  1. Set-up: every target answers /healthz; the product is created with the
//     admin token (or an existing one is read) and every target must see it,
//     which catches replicas that do not share a database. A sale of many
//     products (Config.Products) creates them all.
//  2. Attack: Vegeta (github.com/tsenart/vegeta/v12, used as a library) sends
//     POST /api/v1/products/:id/purchase in a burst, at a constant rate or a
//     linear ramp, each request with a fresh user id except a configured
//     share of repeat buyers, bounded by a request count, a duration and a
//     hard deadline; a caller may end it sooner (Config.End). Over many products, each fresh buyer's product is drawn
//     with Config.Skew: a few hot products and a long tail.
//     Against a service with a payment window, a 201 is a reservation:
//     its buyer pays, cancels or lets it lapse (Config.Life), some payers
//     late on purpose, and units that come back are bought again. After
//     the attack, Run waits for the expiry to return what lapsed, and a
//     close-out may buy what came back.
//  3. Verification: each product and all its orders are read back through
//     the API and the pure function Check compares them with what the attack
//     observed of that product (see Check for the invariants). The sale's
//     verdict is the worst of its products': totals that add up can hide
//     one product oversold and another short.
//  4. Linearizability: every request of the run is in its history (see Op),
//     with reads and restocks mixed into the attack when Config.Mix asks;
//     CheckHistory holds it to a model of the API (model.go) with
//     porcupine, and finds what the counts cannot: a read of a state that
//     never existed, a sold-out answer while stock was left, a restock
//     answer that is not the stock it set, a payment accepted after its
//     order expired. The service's expiry rounds, which no request makes,
//     are rebuilt from the orders listed after the sale.
//
// A checker that never fails proves nothing, so Config.ExpectOversell inverts
// the verdict: run against a deliberately broken lock mode, the test passes
// only when it catches the oversell or a history that is not linearizable.
package loadtest

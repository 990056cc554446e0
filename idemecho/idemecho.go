// Package idemecho serves echo handlers under idemserver's keys, so that
// what an echo handler answers, an error it returns included, is what
// idemserver stores and replays.
//
// echo.WrapMiddleware(keys.Middleware(route)) gives a handler a response
// over idemserver's writer, and what it writes is stored. An error it
// returns is not: echo answers it after the middleware has returned, when
// idemserver has found nothing written, rolled the work back and answered
// 500 (a 400 the handler meant is never sent). Handle runs echo's
// HTTPErrorHandler inside idemserver, so that the error's answer is the
// one stored (a 4xx) or rolled back (a 5xx), and the handler's c.Request()
// is the request idemserver prepared (its Tx and its body). A handler
// that returns nil without writing gets echo's answer to it, an empty 200.
// Behind echo's Recover, a handler that panics leaves the client
// idemserver's 500, its work rolled back.
//
//	e.POST("/orders", idemecho.Handle(keys, idemserver.Route{}, createOrder))
//
// The handler may run more than once for one request (see idemserver):
// each run starts with a fresh response.
package idemecho

import (
	"net/http"

	"github.com/idemkit/idem/idemserver"
	"github.com/labstack/echo/v4"
)

// Handle returns an echo handler that serves h as route of keys: a request
// with a key runs h at most as idemserver allows and gets the answer
// idemserver stores, sent after the commit; a retry gets it replayed
// without running h.
func Handle(keys *idemserver.Keys, route idemserver.Route, h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		outer, request := c.Response(), c.Request()
		defer func() { c.SetResponse(outer); c.SetRequest(request) }()
		keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.SetRequest(r)
			c.SetResponse(echo.NewResponse(w, c.Echo()))
			if err := h(c); err != nil {
				c.Echo().HTTPErrorHandler(err, c)
			} else if !c.Response().Committed {
				c.Response().WriteHeader(http.StatusOK) // echo's answer to a handler that wrote nothing
			}
		})).ServeHTTP(outer, request)
		return nil
	}
}

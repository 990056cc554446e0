-- name: CreateOrder :one
INSERT INTO orders (item, quantity) VALUES ($1, $2) RETURNING id, item, quantity;

-- name: CountOrders :one
SELECT count(*) FROM orders;

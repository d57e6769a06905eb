-- The reservation schema of `mysqlcdc demo`, plus the transactional outbox table.
CREATE DATABASE IF NOT EXISTS mysqlcdc_demo;
USE mysqlcdc_demo;

CREATE TABLE user (
  id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, email VARCHAR(128) NOT NULL);
CREATE TABLE thing (
  id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, price DECIMAL(10,2) NOT NULL);
CREATE TABLE reservation (
  id INT PRIMARY KEY, user_id INT NOT NULL, thing_id INT NOT NULL,
  starts_at DATETIME NOT NULL, status ENUM('pending','confirmed','cancelled') NOT NULL);

-- One row per business event, written in the same transaction as the change it
-- announces; the outbox transform turns each insert into one Kafka message.
CREATE TABLE cdc_outbox (
  id CHAR(36) PRIMARY KEY,                 -- the event id (a UUID)
  aggregatetype VARCHAR(64) NOT NULL,      -- routes the topic: outbox.event.reservation
  aggregateid VARCHAR(64) NOT NULL,        -- the message key
  type VARCHAR(64) NOT NULL,               -- the event type, a message header
  payload JSON NOT NULL,                   -- the message value
  created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3));

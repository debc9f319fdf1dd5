#!/bin/bash
echo 1 > /app/a.txt

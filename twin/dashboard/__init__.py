"""`twin dashboard LAB`: a live web page of the fabric, served on localhost."""

"""One run of ``send_mail``: its call checked and stamped, its receipt, its guard, its deferral
carried out, its refused co-recipients."""
